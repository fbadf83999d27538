"""Checkpoints are atomic, and --resume continues at the right round with the same outcome."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from genrl_swarm.run.checkpoint import latest_checkpoint, save_checkpoint
from genrl_swarm.run.launcher import run_recipe
from genrl_swarm.run.metrics import read_metrics

from helpers import RecordingGame


def rewards_by_round(summary) -> dict[int, dict[str, float]]:
    return {r.round: r.rewards for r in summary.results["peer-0"]}


def test_resume_continues_at_next_round_and_matches_an_uninterrupted_run(bandit_recipe, tmp_path: Path) -> None:
    full = run_recipe(bandit_recipe("game.max_rounds=6", f"run.dir={tmp_path / 'full'}"))
    first = run_recipe(bandit_recipe("game.max_rounds=4", "run.checkpoint_every=2", f"run.dir={tmp_path / 'split'}"))
    assert latest_checkpoint(tmp_path / "split" / "peer-1" / "checkpoints")[0] == 3
    second = run_recipe(bandit_recipe("game.max_rounds=6", f"run.dir={tmp_path / 'split'}"), resume=True)
    assert [r.round for r in second.results["peer-0"]] == [4, 5]
    # Same seeds, same tasks, restored policy and RNG: the resumed run replays the uninterrupted one.
    assert {**rewards_by_round(first), **rewards_by_round(second)} == rewards_by_round(full)
    logged = [m["round"] for m in read_metrics(tmp_path / "split" / "peer-2" / "metrics.jsonl")]
    assert logged == [0, 1, 2, 3, 4, 5]
    assert second.standings == pytest.approx(full.standings)  # cumulative rewards continue, not restart


def test_resume_after_a_crash_past_the_checkpoint_logs_each_round_once(bandit_recipe, tmp_path: Path) -> None:
    """Rounds 4-5 were played and logged after the round-3 checkpoint, then the run died: the
    resumed run replays them, and metrics.jsonl keeps one row per round."""
    run_recipe(bandit_recipe("game.max_rounds=6", "run.checkpoint_every=4", f"run.dir={tmp_path / 'r'}"))
    for peer in ("peer-0", "peer-1", "peer-2"):  # the whole process died after round 5, its last save lost
        checkpoints = tmp_path / "r" / peer / "checkpoints"
        shutil.rmtree(checkpoints / "round_000005")
        (checkpoints / "latest").write_text("round_000003")
    resumed = run_recipe(bandit_recipe("game.max_rounds=8", f"run.dir={tmp_path / 'r'}"), resume=True)
    assert [r.round for r in resumed.results["peer-0"]] == [4, 5, 6, 7]
    rows = read_metrics(tmp_path / "r" / "peer-0" / "metrics.jsonl")
    assert [m["round"] for m in rows] == list(range(8))
    cumulative = [m["reward/cumulative"] for m in rows]
    assert cumulative == sorted(cumulative) and cumulative[4] > cumulative[3] > 0


def test_resume_without_checkpoint_starts_at_zero(bandit_recipe) -> None:
    summary = run_recipe(bandit_recipe("game.max_rounds=2"), resume=True)
    assert [r.round for r in summary.results["peer-0"]] == [0, 1]


class CrashingSave(RecordingGame):
    def save(self, directory: Path) -> None:
        (directory / "half-written").write_text("x")
        raise OSError("disk full")


def test_crash_mid_write_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    good = RecordingGame([])
    save_checkpoint(tmp_path, 1, {"policy": good}, {})
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, 2, {"policy": CrashingSave([])}, {})
    assert latest_checkpoint(tmp_path) == (1, tmp_path / "round_000001")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "round_000001"]


def test_only_keep_newest(tmp_path: Path) -> None:
    for r in range(5):
        save_checkpoint(tmp_path, r, {"policy": RecordingGame([])}, {}, keep=2)
    assert sorted(p.name for p in tmp_path.glob("round_*")) == ["round_000003", "round_000004"]


def test_console_table_prints_every_peer_each_round(bandit_recipe) -> None:
    out = io.StringIO()
    run_recipe(bandit_recipe("game.max_rounds=3", "run.console=true"), stream=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:4] == ["round", "peer-0", "peer-1", "peer-2"]
    assert [line.split()[0] for line in lines[1:]] == ["1/3", "2/3", "3/3"]


def test_tensorboard_events_written(bandit_recipe, tmp_path: Path) -> None:
    run_recipe(bandit_recipe("game.max_rounds=2", "run.tensorboard=true"))
    assert list((tmp_path / "run" / "peer-0" / "tb").glob("events.out.tfevents.*"))
