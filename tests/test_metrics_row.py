"""What a metrics row holds beyond the round's reward: each stage's reward (own and the swarm's),
this process's memory, and, in events.jsonl, the game the dashboard ranks peers within."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from genrl_swarm.core.types import Rollout, RoundResult, RoundRewards, ScoredRollout
from genrl_swarm.run import memory
from genrl_swarm.run.events import EVENTS_FILE
from genrl_swarm.run.launcher import run_recipe
from genrl_swarm.run.metrics import flatten, read_metrics


def scored(peer: str, stage: int, *rewards: float) -> ScoredRollout:
    return ScoredRollout(Rollout(peer, 0, stage, body=None), rewards)


def test_rewards_split_by_stage() -> None:
    rewards = RoundRewards(0, (scored("a", 0, 1.0, 0.0), scored("a", 1, 0.0), scored("b", 0, 1.0), scored("b", 2, 0.25)))
    assert rewards.mean_by_stage() == {0: {"a": 0.5, "b": 1.0}, 1: {"a": 0.0}, 2: {"b": 0.25}}
    result = RoundResult(0, "a", rewards.mean_by_peer(), ("b",), {"time/train": 2.0}, {}, rewards.mean_by_stage())
    row = flatten(result)
    assert (row["reward/own_s0"], row["reward/swarm_mean_s0"]) == (0.5, 0.75)
    assert (row["reward/own_s1"], row["reward/swarm_mean_s1"]) == (0.0, 0.0)  # a stage that learns nothing shows 0
    assert "reward/own_s2" not in row and row["reward/swarm_mean_s2"] == 0.25  # a stage "a" did not play: no own value
    assert row["reward/own"] == pytest.approx(1 / 3) and row["time/train"] == 2.0


def test_memory_is_this_processs_resident_set_and_its_peak() -> None:
    mem = memory.memory_metrics()
    assert 10 < mem["mem/rss_mb"] <= mem["mem/peak_rss_mb"] < 1 << 20


def test_memory_without_proc_still_reports_the_peak(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(memory, "STATUS", tmp_path / "absent")
    mem = memory.memory_metrics()
    assert set(mem) == {"mem/peak_rss_mb"} and mem["mem/peak_rss_mb"] > 10


def test_a_bandit_runs_rows_hold_each_stages_reward_and_the_memory(bandit_recipe: Any, tmp_path: Path) -> None:
    run_recipe(bandit_recipe("game.max_rounds=2", "game.mode=train"))
    for peer in ("peer-0", "peer-1", "peer-2"):
        rows = read_metrics(tmp_path / "run" / peer / "metrics.jsonl")
        assert [r["round"] for r in rows] == [0, 1]
        for row in rows:
            assert {"reward/own_s0", "reward/own_s1", "reward/swarm_mean_s0", "reward/swarm_mean_s1"} <= set(row)
            assert 0 <= row["reward/own_s0"] <= 1 and 0 <= row["reward/own_s1"] <= 1
            assert 10 < row["mem/rss_mb"] <= row["mem/peak_rss_mb"]
        start = json.loads((tmp_path / "run" / peer / EVENTS_FILE).read_text().splitlines()[0])
        assert start["kind"] == "start" and start["game"] == "bandit"
