"""Held-out evaluation: accuracy and format are scored apart, greedily, at the right rounds."""

from __future__ import annotations

import io
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from genrl_swarm.core import Body, StageInput, Task
from genrl_swarm.core.types import RoundResult
from genrl_swarm.dashboard.runs import RunWatcher
from genrl_swarm.dashboard.view import snapshot
from genrl_swarm.games.reasoning_gym.heldout import HeldOutEval, Score, evaluate, score_texts
from genrl_swarm.run.metrics import read_metrics

from helpers import Echo, echo

TASKS = [Task.create("What is 2 + 2?", answer="4"), Task.create("What is 3 * 3?", answer="9")]


class Scripted:
    """A policy that replies from a script per prompt and records whether it was asked greedily."""

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies = replies
        self.greedy: list[bool] = []

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        self.greedy.append(greedy)
        return [echo(i, self.replies[i.prompt]) for i in inputs]

    def texts(self, body: Body) -> tuple[str, ...]:
        assert isinstance(body, Echo)
        return body.outputs


def test_accuracy_and_format_are_separate() -> None:
    # right and untagged; wrong but well formatted
    assert score_texts(TASKS, ["2 + 2 = 4", "<answer>8</answer>"]) == Score(0.5, 0.5, 2)
    assert score_texts(TASKS, ["<answer>4</answer>", "<answer>9</answer>"]) == Score(1.0, 1.0, 2)
    assert score_texts(TASKS, ["four", "The answer is 9."]) == Score(0.5, 0.0, 2)
    assert score_texts([], []).n == 0
    with pytest.raises(ValueError, match="2 tasks but 1"):
        score_texts(TASKS, ["4"])


def test_evaluation_is_greedy() -> None:
    policy = Scripted({"What is 2 + 2?": "4", "What is 3 * 3?": "6"})
    assert evaluate(policy, TASKS).accuracy == 0.5  # type: ignore[arg-type]
    assert policy.greedy == [True]


def manager(peer: str, replies: dict[str, str]) -> Any:
    return SimpleNamespace(peer_id=peer, policy=Scripted(replies), data=SimpleNamespace(eval_tasks=lambda: TASKS))


def test_hook_scores_before_every_n_rounds_and_the_last() -> None:
    out = io.StringIO()
    hook = HeldOutEval(every=2, max_rounds=5, peers=2, stream=out)
    a = manager("a", {"What is 2 + 2?": "4", "What is 3 * 3?": "9"})
    b = manager("b", {"What is 2 + 2?": "4", "What is 3 * 3?": "<answer>1</answer>"})
    hook.before(a)
    for r in range(5):
        for m in (a, b):
            hook(m, RoundResult(r, m.peer_id, {}, ()))
    assert [rounds for rounds, _ in hook.scores["a"]] == [0, 2, 4, 5]
    assert [rounds for rounds, _ in hook.scores["b"]] == [2, 4, 5]
    assert hook.table() == [(0, 1.0, 0.0), (2, 0.75, 0.25), (4, 0.75, 0.25), (5, 0.75, 0.25)]  # exact in binary
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].startswith("held-out after 2 rounds") and "accuracy 0.750, format 0.250" in lines[0]


def test_the_scores_join_the_rows_of_the_rounds_they_follow() -> None:
    """The start score in each peer's first row (every peer starts from the same weights), each
    later score in the row of the round it was measured after: metrics.jsonl holds what is printed."""
    hook = HeldOutEval(every=2, max_rounds=3)
    a = manager("a", {"What is 2 + 2?": "4", "What is 3 * 3?": "<answer>9</answer>"})
    b = manager("b", {"What is 2 + 2?": "4", "What is 3 * 3?": "1"})
    hook.before(a)
    rows: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
    for r in range(3):
        for m in (a, b):
            result = RoundResult(r, m.peer_id, {}, (), {"time/train": 1.0})
            hook(m, result)
            rows[m.peer_id].append(result.metrics)
    before = {"heldout/accuracy_before": 1.0, "heldout/format_before": 0.5}
    assert rows["a"] == [{"time/train": 1.0, **before}, {"time/train": 1.0, "heldout/accuracy": 1.0, "heldout/format": 0.5}, rows["a"][2]]
    assert rows["b"][0] == {"time/train": 1.0, **before} and rows["b"][1] == {"time/train": 1.0, "heldout/accuracy": 0.5, "heldout/format": 0.0}
    assert rows["b"][2]["heldout/accuracy"] == 0.5 and "heldout/accuracy_before" not in rows["b"][2]  # the last round is scored


def test_hook_with_every_zero_scores_only_after_the_last_round() -> None:
    hook = HeldOutEval(every=0, max_rounds=3)
    a = manager("a", {"What is 2 + 2?": "4", "What is 3 * 3?": "9"})
    for r in range(3):
        hook(a, RoundResult(r, "a", {}, ()))
    assert [rounds for rounds, _ in hook.scores["a"]] == [3]


def test_demo_prints_held_out_accuracy_before_and_after_training(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from genrl_swarm.games.reasoning_gym import demo

    overrides = ["policy.model=tiny-random", "swarm.num_peers=1", "game.max_rounds=2", "game.eval_every=1", "data.eval_size=4", "policy.sampling.max_new_tokens=3",
                 "policy.sampling.num_generations=2", f"run.dir={tmp_path}", "run.tensorboard=false", "run.plot=false"]  # fmt: skip
    assert demo.main(overrides) == 0
    out = capsys.readouterr().out
    assert "held-out before training (greedy, 4 problems never served in a round)" in out
    assert "held-out after 1 rounds" in out and "held-out after 2 rounds" in out
    rows = [line.split() for line in out.split("rounds trained")[1].splitlines()[1:4]]
    assert [r[0] for r in rows] == ["0", "1", "2"] and all(0 <= float(x) <= 1 for r in rows for x in r[1:])
    # The printed accuracies are in metrics.jsonl, and the dashboard plots them against rounds trained.
    logged = read_metrics(tmp_path / "peer-0" / "metrics.jsonl")
    assert [r["round"] for r in logged] == [0, 1]
    assert [logged[0]["heldout/accuracy_before"], logged[0]["heldout/accuracy"], logged[1]["heldout/accuracy"]] == [float(r[1]) for r in rows]
    watcher = RunWatcher([tmp_path])
    watcher.poll()
    held = snapshot(list(watcher.peers.values()), max_points=100)["curves"]["heldout"]
    assert held["x"] == [0, 1, 2] and held["peers"]["peer-0"] == [float(r[1]) for r in rows] == held["means"]["swarm mean"]
    assert demo.main(["game.max_rounds=-1"]) == 2
