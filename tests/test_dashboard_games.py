"""Several runs and games on one page: the leaderboard ranks peers within their game (a bandit's
cumulative reward and an LM's are not one scale), each run has its own progress (two runs'
rounds are not one count), and held-out accuracy is a curve against rounds trained."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from genrl_swarm.dashboard.runs import RunWatcher
from genrl_swarm.dashboard.view import snapshot
from genrl_swarm.run.events import EVENTS_FILE
from test_dashboard_data import row, write_rows


def peer(root: Path, run: str, name: str, rounds: int, cumulative: float, game: str | None, planned: int, **extra: Any) -> None:
    start = {"t": 1.0, "kind": "start", "peer": name, "max_rounds": planned, "stages": 1} | ({"game": game} if game else {})
    write_rows(root / run / name / EVENTS_FILE, [start])
    write_rows(
        root / run / name / "metrics.jsonl", [row(name, r, **{"reward/cumulative": cumulative * (r + 1) / rounds, **extra}) for r in range(rounds)]
    )


def snap(root: Path, runs: list[str]) -> dict[str, Any]:
    watcher = RunWatcher([root / r for r in runs])
    watcher.poll()
    return snapshot(list(watcher.peers.values()), max_points=100, runs=runs)


def test_the_leaderboard_ranks_within_each_game_never_across(tmp_path: Path) -> None:
    peer(tmp_path, "bandit-a", "peer-0", 16, 9.0, "bandit", 16)
    peer(tmp_path, "bandit-a", "peer-1", 16, 8.0, "bandit", 16)
    peer(tmp_path, "bandit-b", "peer-0", 16, 9.5, "bandit", 16)  # another run of the same game: one ranking
    peer(tmp_path, "digits", "peer-0", 12, 0.9, "digits", 12)  # far lower on its own scale, yet first of its game
    peer(tmp_path, "old", "peer-0", 3, 50.0, None, 3)  # a run that does not name its game is a game of its own
    board = snap(tmp_path, ["bandit-a", "bandit-b", "digits", "old"])["leaderboard"]
    assert [(r["game"], r["rank"], r["id"]) for r in board] == [
        ("bandit", 1, "bandit-b/peer-0"),
        ("bandit", 2, "bandit-a/peer-0"),
        ("bandit", 3, "bandit-a/peer-1"),
        ("digits", 1, "digits/peer-0"),
        ("run old", 1, "old/peer-0"),
    ]


def test_each_run_has_its_own_progress(tmp_path: Path) -> None:
    peer(tmp_path, "long", "peer-0", 10, 1.0, "bandit", 100)
    peer(tmp_path, "long", "peer-1", 8, 1.0, "bandit", 100)
    peer(tmp_path, "short", "peer-0", 3, 1.0, "digits", 3)
    runs = {p["run"]: p for p in snap(tmp_path, ["long", "short"])["progress"]}
    assert {k: runs["long"][k] for k in ("game", "rounds_done", "max_rounds", "round", "peers_at")} == {
        "game": "bandit", "rounds_done": 8, "max_rounds": 100, "round": 10, "peers_at": [[8, 1], [10, 1]]
    }  # fmt: skip
    assert {k: runs["short"][k] for k in ("game", "state", "rounds_done", "max_rounds")} == {
        "game": "digits",
        "state": "finished",
        "rounds_done": 3,
        "max_rounds": 3,
    }


def test_held_out_accuracy_is_plotted_against_rounds_trained(tmp_path: Path) -> None:
    for name, accuracies in (("peer-0", [0.5, 0.75]), ("peer-1", [0.25, 0.5])):
        rows = [row(name, r) for r in range(4)]
        rows[0]["heldout/accuracy_before"] = 0.25  # measured before training, logged with the first row
        rows[1]["heldout/accuracy"], rows[3]["heldout/accuracy"] = accuracies  # after 2 and 4 rounds
        write_rows(tmp_path / "digits" / name / "metrics.jsonl", rows)
    held = snap(tmp_path, ["digits"])["curves"]["heldout"]
    assert held["x"] == [0, 2, 4]
    assert held["peers"] == {"peer-0": [0.25, 0.5, 0.75], "peer-1": [0.25, 0.25, 0.5]}
    assert held["means"] == {"swarm mean": [0.25, 0.375, 0.625]}
    assert "heldout" not in snap(tmp_path, ["none"])["curves"]  # no peer logs it: no empty chart
