"""What the page is told when it watches more than one run, and how drops read: two runs'
``peer-0`` stay two rows and two curves, and a drop's kind is a word, not repeated in its reason."""

from __future__ import annotations

import os
import time
from pathlib import Path

from genrl_swarm.dashboard.hub import Hub
from genrl_swarm.dashboard.runs import RunWatcher
from genrl_swarm.dashboard.view import snapshot
from genrl_swarm.run.events import EVENTS_FILE
from test_dashboard_data import row, write_rows


def _snap(dirs: list[Path]) -> dict:
    watcher = RunWatcher(dirs)
    watcher.poll()
    return snapshot(list(watcher.peers.values()), max_points=100, runs=[d.name for d in dirs])


def test_two_runs_with_the_same_peer_ids_are_not_merged(tmp_path: Path) -> None:
    for run, reward in (("alpha", 0.1), ("beta", 0.9)):
        write_rows(
            tmp_path / run / "peer-0" / "metrics.jsonl", [{**row("peer-0", r), "reward/own": reward, "reward/cumulative": reward} for r in range(3)]
        )
        start = {"t": 1.0, "kind": "start", "peer": "peer-0", "game": "bandit"}  # one game: one ranking
        write_rows(tmp_path / run / "peer-0" / EVENTS_FILE, [start])
    snap = _snap([tmp_path / "alpha", tmp_path / "beta"])
    rows = {p["id"]: p for p in snap["peers"]}
    assert set(rows) == {"alpha/peer-0", "beta/peer-0"}
    assert (rows["alpha/peer-0"]["run"], rows["alpha/peer-0"]["reward"]) == ("alpha", 0.1)
    assert (rows["beta/peer-0"]["run"], rows["beta/peer-0"]["reward"]) == ("beta", 0.9)
    assert set(snap["curves"]["reward"]) == {"alpha/peer-0", "beta/peer-0"}
    assert [p["id"] for p in snap["leaderboard"]] == ["beta/peer-0", "alpha/peer-0"]
    one = _snap([tmp_path / "alpha"])  # one run: plain peer ids
    assert [p["id"] for p in one["peers"]] == ["peer-0"]


def test_drop_kinds_read_as_words_and_are_not_repeated(tmp_path: Path) -> None:
    peer = tmp_path / "run" / "me"
    write_rows(peer / "metrics.jsonl", [row("me", 0, **{"dropped/slow": 2})])
    late = {"kind": "drop", "t": 2.0, "round": 0, "stage": 0, "sender": "slow", "drop": "late", "reason": "late: no commitment before the deadline"}
    cpu = {"kind": "drop", "t": 1.0, "round": 0, "stage": 0, "sender": "slow", "drop": "cpu", "reason": "checking took 3.1 s"}
    write_rows(peer / EVENTS_FILE, [late, cpu])
    snap = _snap([tmp_path / "run"])
    slow = next(p for p in snap["peers"] if p["id"] == "slow")
    assert slow["reasons"] == ["late: no commitment before the deadline", "too slow to check: checking took 3.1 s"]
    assert [(i["kind"], i["reason"]) for i in snap["incidents"]] == [
        ("late", "no commitment before the deadline"),
        ("too slow to check", "checking took 3.1 s"),
    ]


def test_charts_without_data_are_left_out(tmp_path: Path) -> None:
    lm = tmp_path / "lm" / "peer-0"
    write_rows(lm / "metrics.jsonl", [row("peer-0", r) for r in range(3)])  # no evaluation, no timings, no environment steps
    curves = _snap([tmp_path / "lm"])["curves"]
    assert {"eval", "times", "marl", "tasks"}.isdisjoint(curves) and curves["reward"]["peer-0"] == [0.0, 0.1, 0.2]
    write_rows(lm / "metrics.jsonl", [row("peer-0", 3, **{"eval/reward": 0.5, "time/train": 1.0})])
    curves = _snap([tmp_path / "lm"])["curves"]
    assert curves["eval"]["peer-0"] == [None, None, None, 0.5] and curves["times"]["train"] == [None, None, None, 1.0]
    write_rows(tmp_path / "new" / "peer-0" / EVENTS_FILE, [{"t": 1.0, "kind": "start", "peer": "peer-0", "max_rounds": 3}])
    assert _snap([tmp_path / "new"])["curves"] == {"x": [], "reward": {"peer-0": []}, "swarm_mean": []}


def _run(root: Path, name: str, rounds: int, planned: int, written: float | None = None) -> None:
    peer = root / name / "peer-0"
    write_rows(peer / EVENTS_FILE, [{"t": 1.0, "kind": "start", "peer": "peer-0", "max_rounds": planned, "stages": 1}])
    write_rows(peer / "metrics.jsonl", [row("peer-0", r, **{"time/train": 1.0}) for r in range(rounds)])
    if written is not None:
        for f in (peer / EVENTS_FILE, peer / "metrics.jsonl"):
            os.utime(f, (written, written))


def test_a_run_that_did_its_rounds_is_finished_and_one_that_stopped_writing_is_stopped(tmp_path: Path) -> None:
    old = time.time() - 3600
    _run(tmp_path, "alpha", 3, 3, written=old)  # ended an hour ago, every round done
    _run(tmp_path, "beta", 1, 3, written=old)  # stopped an hour ago in round 1
    _run(tmp_path, "gamma", 1, 3)  # writing now
    snap = _snap([tmp_path / "alpha", tmp_path / "beta", tmp_path / "gamma"])
    states = {s["run"]: (s["state"], s["rounds_done"], s["max_rounds"]) for s in snap["progress"]}
    assert states == {"alpha": ("finished", 3, 3), "beta": ("stopped", 1, 3), "gamma": ("running", 1, 3)}
    assert snap["state"] == "running"
    assert _snap([tmp_path / "alpha"])["state"] == "finished" and _snap([tmp_path / "alpha", tmp_path / "beta"])["state"] == "stopped"
    # A slow round is not a stop: five of the last round's seconds must pass first.
    _run(tmp_path, "slow", 1, 3, written=time.time() - 200)
    assert _snap([tmp_path / "slow"])["state"] == "stopped"
    write_rows(tmp_path / "slow" / "peer-0" / "metrics.jsonl", [row("peer-0", 1, **{"time/train": 100.0})])
    os.utime(tmp_path / "slow" / "peer-0" / "metrics.jsonl", (time.time() - 200, time.time() - 200))
    assert _snap([tmp_path / "slow"])["state"] == "running"


def test_the_hub_rebuilds_an_idle_run_so_it_can_turn_stopped(tmp_path: Path) -> None:
    _run(tmp_path, "alpha", 1, 3)
    hub = Hub(RunWatcher([tmp_path / "alpha"]), idle_rebuild=30.0)
    assert hub.refresh(100.0)
    hub.version = 1
    assert not hub.refresh(110.0)  # nothing new
    assert hub.refresh(131.0)  # but the page's clock and staleness move on
