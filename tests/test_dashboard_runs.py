"""What the page is told when it watches more than one run, and how drops read: two runs'
``peer-0`` stay two rows and two curves, and a drop's kind is a word, not repeated in its reason."""

from __future__ import annotations

from pathlib import Path

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
