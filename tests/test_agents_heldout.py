"""Held-out seeds of the agent benchmark (games/agent/heldout.py): disjoint from the training
rounds' seeds and questions, distinct, reproducible."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # genrl_swarm.games.agent loads the LM stack

from genrl_swarm.envd.tasks import TASKS  # noqa: E402
from genrl_swarm.games.agent.game import AgentData  # noqa: E402
from genrl_swarm.games.agent.heldout import heldout_seeds, heldout_tasks, training_seeds  # noqa: E402

PREFILL = ['<tool_call>{"name": "calculate", "arguments": {"expression": "', "<answer>"]


def question(kind: str, seed: int) -> str:
    return TASKS[kind].setup(seed, None).prompt


def test_heldout_tasks_are_disjoint_from_training_rounds() -> None:
    data = AgentData(["calculator-1", "calculator-2"], 2, 4, 2, 768, 0, 42, PREFILL)
    train = training_seeds(data, 50)
    assert set(train) == {"calculator-1", "calculator-2"} and len(train["calculator-1"]) == 50  # one instance per round each
    tasks = heldout_tasks(data, 40, 50)
    assert len(tasks) == 80
    for kind in ("calculator-1", "calculator-2"):
        seeds = [int(t.metadata["seed"]) for t in tasks if t.metadata["task"] == kind]
        assert len(set(seeds)) == 40 and not set(seeds) & train[kind]
        asked = {question(kind, s) for s in train[kind]}
        held = [question(kind, s) for s in seeds]
        assert len(set(held)) == 40 and not set(held) & asked  # distinct questions, none a training one
    assert all(t.metadata["prefill"] == PREFILL and t.metadata["max_turns"] == 2 for t in tasks)  # the data's settings
    assert [t.metadata["seed"] for t in heldout_tasks(data, 40, 50)] == [t.metadata["seed"] for t in tasks]  # reproducible


def test_heldout_seeds_skip_excluded_seeds_and_their_questions() -> None:
    first = heldout_seeds("calculator-1", 5, 7)
    again = heldout_seeds("calculator-1", 5, 7, exclude={first[0], first[2]})
    assert first[0] not in again and first[2] not in again and first[1] in again
    assert question("calculator-1", first[0]) not in {question("calculator-1", s) for s in again}
    assert heldout_seeds("calculator-1", 5, 8) != first  # the run's seed picks the stream
    with pytest.raises(ValueError, match="unknown task"):
        heldout_seeds("nope", 1, 0)


def test_streams_differ_and_a_prefix_is_stable() -> None:
    held = heldout_seeds("calculator-1", 64, 42)
    assert heldout_seeds("calculator-1", 16, 42) == held[:16]  # more episodes extend the same set
    assert not set(heldout_seeds("calculator-1", 16, 42, stream="other")) & set(held[:16])


def test_report_prints_before_then_each_peer_after(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from genrl_swarm.games.agent.report import heldout_table

    assert heldout_table(tmp_path) is None
    row = {"kind": "calculator-1", "n": 32, "success": 0.0, "call": 0.25, "answer": 1.0, "turns": 2.0}
    for label, success in (("peer-1", 0.5), ("before", 0.0), ("peer-0", 0.125)):
        (tmp_path / f"heldout_{label}.json").write_text(json.dumps({"wall_s": 177.5, "scores": [row | {"success": success}]}))
    lines = heldout_table(tmp_path).splitlines()  # type: ignore[union-attr]
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| before", "| peer-0", "| peer-1"]
    assert lines[3] == "| peer-0 | calculator-1 | 32 | 0.125 | 0.250 | 1.000 | 178s |"
