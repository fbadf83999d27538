"""Checkpoints sized for their use: with ``run.learner_state_in_latest_only`` only the newest
checkpoint keeps the learner's state (for an LM, the optimizer's moments: 2/3 of the bytes); the
older ones stay loadable models and resumable, with the optimizer starting fresh."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from genrl_swarm.run.checkpoint import latest_checkpoint
from genrl_swarm.run.launcher import run_recipe
from genrl_swarm.run.metrics import read_metrics


def kept(checkpoints: Path) -> dict[str, list[str]]:
    return {p.name: sorted(c.name for c in p.iterdir()) for p in sorted(checkpoints.glob("round_*"))}


def test_only_the_newest_checkpoint_keeps_the_learner_state(bandit_recipe: object, tmp_path: Path) -> None:
    common = ["swarm.num_peers=1", "game.mode=train", "run.checkpoint_every=1", "run.keep_checkpoints=3"]
    run_recipe(bandit_recipe("game.max_rounds=5", "run.learner_state_in_latest_only=true", *common))  # type: ignore[operator]
    checkpoints = tmp_path / "run" / "peer-0" / "checkpoints"
    assert kept(checkpoints) == {
        "round_000002": ["policy", "state.json"],
        "round_000003": ["policy", "state.json"],
        "round_000004": ["learner", "policy", "state.json"],
    }
    assert not [p.name for p in checkpoints.iterdir() if p.name.startswith(".")]


def test_an_older_checkpoint_without_learner_state_resumes_with_a_fresh_optimizer(
    bandit_recipe: object, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    common = ["swarm.num_peers=1", "game.mode=train", "run.checkpoint_every=1", "run.learner_state_in_latest_only=true"]
    run_recipe(bandit_recipe("game.max_rounds=5", *common))  # type: ignore[operator]
    checkpoints = tmp_path / "run" / "peer-0" / "checkpoints"
    shutil.rmtree(checkpoints / "round_000004")  # say the newest was lost: the one before has no learner/
    (checkpoints / "latest").write_text("round_000003")
    with caplog.at_level(logging.WARNING):
        resumed = run_recipe(bandit_recipe("game.max_rounds=6", *common), resume=True)  # type: ignore[operator]
    assert [r.round for r in resumed.results["peer-0"]] == [4, 5]
    assert "holds no learner state" in caplog.text
    assert [row["round"] for row in read_metrics(tmp_path / "run" / "peer-0" / "metrics.jsonl")] == list(range(6))
    assert latest_checkpoint(checkpoints)[0] == 5  # type: ignore[index]


def test_by_default_every_checkpoint_keeps_the_learner_state(bandit_recipe: object, tmp_path: Path) -> None:
    run_recipe(bandit_recipe("game.max_rounds=3", "swarm.num_peers=1", "game.mode=train", "run.checkpoint_every=1"))  # type: ignore[operator]
    assert all("learner" in parts for parts in kept(tmp_path / "run" / "peer-0" / "checkpoints").values())
