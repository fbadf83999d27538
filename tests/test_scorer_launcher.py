"""End to end through the real launcher: the packaged ``reasoning_gym`` recipe, three in-memory
peers, one of which sends completions built to run code through Reasoning Gym's ``eval``-based
scorers, or to burn CPU in them. Nothing runs, honest peers score each other as before, and the
stranger's bodies are dropped and counted."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from genrl_swarm.config import load_recipe
from genrl_swarm.core import StageInput
from genrl_swarm.core.game import GameManager
from genrl_swarm.run.launcher import build_managers, run_managers

pytestmark = pytest.mark.slow  # LM runs with sandboxed scorers


def hostile(manager: GameManager, completion: str) -> None:
    """Make ``manager``'s peer send ``completion`` as every sample: its own prompt ids, its own
    tokenizer fingerprint, a length within max_new_tokens, so every check before scoring passes."""
    policy = manager.policy
    ids = tuple(policy.tokenizer(completion, add_special_tokens=False)["input_ids"])
    act = policy.act

    def act_hostile(inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Any]:
        bodies = act(inputs, stage, greedy)
        sample = lambda s: msgspec.structs.replace(s, completion_ids=ids, logprobs=(-1.0,) * len(ids), finish_reason="length")  # noqa: E731
        return [msgspec.structs.replace(b, samples=tuple(sample(s) for s in b.samples)) for b in bodies]

    policy.act = act_hostile  # type: ignore[method-assign]


def play(tmp_path: Path, dataset: str, completion: str, *more: str) -> tuple[list[GameManager], dict[str, list[Any]], float]:
    overrides = [
        f"run.dir={tmp_path / 'run'}", "run.tensorboard=false", "run.console=false", "run.plot=false", "run.checkpoint_every=0",
        "policy.model=tiny-random", "policy.sampling.max_new_tokens=192", "policy.sampling.num_generations=2",
        "game.max_rounds=1", "game.mode=train", "swarm.num_peers=3", "data.tasks_per_round=2", f"data.datasets=[{dataset}]",
        "learner.grpo.num_local=2", "learner.grpo.num_external=2", *more,
    ]  # fmt: skip
    managers, _ = build_managers(load_recipe("reasoning_gym", overrides))
    hostile(managers[-1], completion)
    start = time.monotonic()
    results = run_managers(managers)
    return managers, results, time.monotonic() - start


def test_a_strangers_completion_cannot_run_code_through_a_scorer(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    attack = f'<answer>__import__("os").system("touch {marker}") or [open("{marker}", "w")]</answer>'
    managers, results, _ = play(tmp_path, "spiral_matrix", attack)
    assert not marker.exists()
    evil, honest = managers[-1].peer_id, managers[:-1]
    for m in honest:
        (result,) = results[m.peer_id]
        assert m.book.drops[(evil, "scoring")] == 2  # both its bodies, counted against it
        assert evil not in result.rewards
    a, b = (results[m.peer_id][0] for m in honest)
    assert a.rewards[b.peer_id] == b.rewards[b.peer_id] and b.rewards[a.peer_id] == a.rewards[a.peer_id]  # honest scores unchanged


def test_an_exponent_tower_costs_the_sender_its_budget_not_the_round(tmp_path: Path) -> None:
    budget = 0.5
    managers, results, elapsed = play(tmp_path, "spiral_matrix", "<answer>9**9**9**9**9</answer>", f"trust.cpu_budget={budget}")
    evil = managers[-1].peer_id
    for m in managers[:-1]:
        assert m.book.drops[(evil, "scoring")] >= 1  # the first body cut off at the budget ...
        assert m.book.drops[(evil, "cpu")] >= 1  # ... the rest never scored: over budget (cut, not quarantined:
        # what a body costs depends on the checking machine's load, which no other peer reproduces)
    assert elapsed < 300  # without the cut, 9**9**9**9**9 never returns
