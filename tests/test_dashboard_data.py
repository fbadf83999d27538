"""The dashboard's readers: tailing live files, downsampling, what the page is told about
peers, drops and the leaderboard, and the recorder hook on a real bandit run. No server here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from genrl_swarm.dashboard.downsample import buckets, series
from genrl_swarm.dashboard.runs import RunWatcher
from genrl_swarm.dashboard.tail import JsonlTail
from genrl_swarm.dashboard.view import snapshot
from genrl_swarm.run.events import EVENTS_FILE


def write_rows(path: Path, rows: list[dict[str, Any]], mode: str = "a") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode) as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def row(peer: str, r: int, **extra: Any) -> dict[str, Any]:
    return {"round": r, "peer": peer, "winners": [peer], "reward/own": r / 10, f"reward/peer/{peer}": r / 10, "reward/swarm_mean": r / 10, **extra}


def test_tail_reads_whole_lines_once_and_rereads_a_rewritten_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    tail = JsonlTail(path)
    assert tail.read() == ([], False)  # not there yet
    path.write_text('{"round": 0}\n{"round": 1')  # the second line is still being written
    assert tail.read() == ([{"round": 0}], False)
    with path.open("a") as f:
        f.write('}\n{"round": 2}\n')
    assert tail.read() == ([{"round": 1}, {"round": 2}], False)
    assert tail.read() == ([], False)
    # A resumed run rewrites the file (keeping round 0) and appends: now as long as before, or longer.
    path.write_text('{"round": 0}\n{"round": 1, "x": 1}\n{"round": 2, "y": 2}\n')
    rows, rewritten = tail.read()
    assert rewritten and [r["round"] for r in rows] == [0, 1, 2] and rows[1] == {"round": 1, "x": 1}


def test_curves_of_100_peers_are_downsampled_aligned_and_averaged(tmp_path: Path) -> None:
    for p in range(100):
        write_rows(
            tmp_path / "run" / f"peer-{p}" / "metrics.jsonl",
            [row(f"peer-{p}", r, **{"time/exchange_s0": 0.5, "time/train": 0.25}) for r in range(400)],
        )
    watcher = RunWatcher([tmp_path / "run"])
    assert watcher.poll()
    snap = snapshot(list(watcher.peers.values()), max_points=80)
    curves = snap["curves"]
    assert len(curves["x"]) == 80 and curves["x"][:2] == [0, 5]  # 400 rounds in 80 buckets of 5
    assert len(curves["reward"]) == 100 and {len(v) for v in curves["reward"].values()} == {80}
    assert curves["reward"]["peer-7"][1] == 0.7  # mean of rounds 5..9 = 7 / 10
    assert curves["times"]["exchange"][0] == 0.5 and curves["times"]["generate"][0] is None
    assert len(snap["peers"]) == 100 and [s["id"] for s in snap["leaderboard"][:1]] == ["peer-0"]
    assert len(json.dumps(snap)) < 2_000_000  # pushed every second at most: stays a few hundred KB


def test_peers_seen_only_by_others_drops_reasons_and_quarantines(tmp_path: Path) -> None:
    me = tmp_path / "run" / "me"
    write_rows(
        me / "metrics.jsonl",
        [
            row("me", 0, **{"reward/peer/far": 0.4, "dropped/far": 2, "reward/cumulative": 1.5, "wins": 1}),
            row("me", 1, **{"reward/peer/far": 0.4, "dropped/far": 1, "reward/cumulative": 2.0, "wins": 1}),
        ],
    )
    write_rows(me / EVENTS_FILE, [
        {"t": 1.0, "kind": "start", "peer": "me", "backend": "HivemindBackend", "stages": 2, "max_rounds": 10},
        {"t": 2.0, "kind": "drop", "round": 1, "stage": 0, "sender": "far", "drop": "payload", "reason": "revealed payload does not match its commitment"},
        {"t": 3.0, "kind": "quarantine", "round": 1, "sender": "far", "reason": "payload: revealed payload does not match its commitment", "until": 5},
        {"t": 4.0, "kind": "stage", "round": 2, "stage": 0, "got": 1, "expected": 2},
    ])  # fmt: skip
    watcher = RunWatcher([tmp_path / "run"])
    watcher.poll()
    snap = snapshot(list(watcher.peers.values()), max_points=100)
    peers = {p["id"]: p for p in snap["peers"]}
    assert peers["me"]["backend"] == "HivemindBackend" and (peers["me"]["round"], peers["me"]["stage"]) == (2, 1)
    far = peers["far"]
    assert far["local"] is False and far["dropped"] == 3 and far["quarantined_by"] == 1 and far["scored"] == 0.4
    assert (
        far["reasons"][0].startswith("quarantined: payload: revealed")
        and "bad payload: revealed payload does not match its commitment" in far["reasons"]
    )
    (progress,) = snap["progress"]
    assert {k: progress[k] for k in ("round", "rounds_done", "max_rounds", "stages", "peers_at")} == {
        "round": 2, "rounds_done": 2, "max_rounds": 10, "stages": 2, "peers_at": [[2, 1]]
    }  # fmt: skip
    assert [i["kind"] for i in snap["incidents"]] == ["quarantine", "bad payload"]


def test_the_leaderboard_is_each_peers_last_tally_best_first(tmp_path: Path) -> None:
    for peer, total, wins in (("a", 1.0, 3), ("b", 2.5, 0), ("c", 1.0, 4)):
        write_rows(
            tmp_path / "run" / peer / "metrics.jsonl",
            [row(peer, 0, **{"reward/cumulative": 0.1, "wins": 0}), row(peer, 1, **{"reward/cumulative": total, "wins": wins})],
        )
    watcher = RunWatcher([tmp_path / "run"])
    watcher.poll()
    board = snapshot(list(watcher.peers.values()), max_points=10)["leaderboard"]
    assert [(s["id"], s["cumulative"], s["wins"]) for s in board] == [("b", 2.5, 0), ("c", 1.0, 4), ("a", 1.0, 3)]


def test_buckets_cover_every_round_once() -> None:
    groups = buckets(list(range(10)), 4)
    assert groups == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert series({0: 1.0, 2: 3.0, 9: float("nan")}, groups) == [2.0, None, None, None]


def test_the_recorder_logs_the_backend_stages_and_why_a_payload_was_dropped(bandit_recipe: Any, tmp_path: Path) -> None:
    from genrl_swarm.run.launcher import build_managers, run_managers

    managers, run = build_managers(bandit_recipe("game.max_rounds=2", "game.mode=train"))
    tamper_reveal(managers[2].comm, rounds={1})
    run_managers(managers)
    events = [json.loads(line) for line in (Path(run.dir) / "peer-0" / EVENTS_FILE).read_text().splitlines()]
    assert events[0]["kind"] == "start" and events[0]["backend"] == "InMemoryBackend" and events[0]["stages"] == 2
    assert [(e["round"], e["stage"]) for e in events if e["kind"] == "stage"] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    drops = [e for e in events if e["kind"] == "drop"]
    assert drops and {(d["sender"], d["drop"], d["round"]) for d in drops} == {("peer-2", "payload", 1)}
    assert drops[0]["reason"] == "revealed payload does not match its commitment"
    assert [(e["sender"], e["until"]) for e in events if e["kind"] == "quarantine"] == [("peer-2", 5)]


def tamper_reveal(comm: Any, rounds: set[int]) -> None:
    """Make this peer reveal bytes other than those it committed to, in ``rounds``: a hostile
    (or broken) peer whose payloads everyone else drops."""
    honest = comm._exchange_bytes

    def exchange_bytes(round: int, stage: int, phase: str, data: bytes, *args: Any, **kwargs: Any) -> Any:
        if phase == "reveal" and round in rounds:
            data = data[:-1] + bytes([data[-1] ^ 1])
        return honest(round, stage, phase, data, *args, **kwargs)

    comm._exchange_bytes = exchange_bytes


def test_status_endpoints_are_checked_and_bounded() -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from genrl_swarm.dashboard.status import MAX_BYTES, StatusPoller

    answers = {
        "/ok": b'{"peer": "peer-9", "round": 4, "stage": 1, "backend": "HivemindBackend", "extra": "ignored"}',
        "/negative": b'{"peer": "peer-8", "round": -1}',
        "/huge": b'{"peer": "' + b"x" * MAX_BYTES + b'"}',
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            body = answers.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        statuses, errors = StatusPoller([f"{base}/ok", f"{base}/negative", f"{base}/huge", f"{base}/missing"]).read()
    finally:
        server.shutdown()
    assert list(statuses) == ["peer-9"] and statuses["peer-9"]["round"] == 4 and statuses["peer-9"]["backend"] == "HivemindBackend"
    assert "extra" not in statuses["peer-9"] and statuses["peer-9"]["live"] is True
    assert len(errors) == 3 and "not a status document" in errors[0] and f"over {MAX_BYTES} bytes" in errors[1] and "unreachable" in errors[2]


def test_marl_returns_and_agentic_success_per_task_get_their_curves(tmp_path: Path) -> None:
    for p in range(2):
        write_rows(tmp_path / "run" / f"peer-{p}" / "metrics.jsonl", [
            row(f"peer-{p}", r, **{"train/env_steps": 1000.0 * (r + 1), "eval/reward": 2.0 * r + p, "eval/return_std": 0.5, "success/calculator": r / 4, "success/sql": 1.0})
            for r in range(4)
        ])  # fmt: skip
    write_rows(tmp_path / "plain" / "peer-0" / "metrics.jsonl", [row("peer-0", 0)])
    watcher = RunWatcher([tmp_path / "run"])
    watcher.poll()
    curves = snapshot(list(watcher.peers.values()), max_points=100)["curves"]
    assert curves["marl"]["steps"] == [1000.0, 2000.0, 3000.0, 4000.0]
    assert curves["marl"]["eval_return"] == [0.5, 2.5, 4.5, 6.5] and curves["marl"]["eval_std"] == [0.5] * 4
    assert curves["tasks"] == {"calculator": [0.0, 0.25, 0.5, 0.75], "sql": [1.0] * 4}
    plain = RunWatcher([tmp_path / "plain"])
    plain.poll()
    assert not {"marl", "tasks"} & set(snapshot(list(plain.peers.values()), max_points=100)["curves"])  # panels hidden


def test_hostile_lines_are_skipped_and_later_rows_still_arrive(tmp_path: Path) -> None:
    """A 100 KB line of ``[`` (RecursionError in json), a 5000-digit int, NaN and 1e999 in the
    start event: each bad line is skipped and counted, later rows arrive, the snapshot encodes."""
    from genrl_swarm.dashboard.hub import Hub

    peer = tmp_path / "run" / "peer-0"
    write_rows(peer / "metrics.jsonl", [row("peer-0", 0)])
    hub = Hub(RunWatcher([tmp_path / "run"]))
    hub.refresh(0.0)
    with (peer / "metrics.jsonl").open("a") as f:
        f.write("[" * 100_000 + "\n")
        f.write('{"round": 1, "x": ' + "9" * 5000 + "}\n")
        f.write('{"round": 1e999, "reward/own": 1e999}\n')
        f.write('{"round": 99999999999999999999, "reward/own": 0.5}\n')
    write_rows(peer / "metrics.jsonl", [row("peer-0", r, **{"reward/cumulative": 1e300 * 1e10, "wins": 10**40}) for r in range(1, 4)])
    write_rows(
        peer / EVENTS_FILE,
        [
            {"t": 1e999, "kind": "start", "peer": "peer-0", "stages": float("nan"), "max_rounds": 10**30, "start_round": float("inf")},
            {"t": 2.0, "kind": "drop", "round": 10**30, "stage": -5, "sender": "x", "reason": "r"},
        ],
    )
    hub.refresh(1.0)
    log = next(iter(hub.runs.peers.values()))
    assert sorted(log.rows) == [0, 1, 2, 3] and log.metrics.skipped == 2  # rows with a round of 1e999 or 10**20 parse, then are ignored
    snap = json.loads(hub.build())  # allow_nan=False: raises on any NaN/inf left
    me = snap["peers"][0]
    assert me["rounds_done"] == 4 and me["stages"] is None and me["max_rounds"] is None and me["wins"] is None
    assert snap["progress"][0]["max_rounds"] is None and snap["incidents"][0]["round"] is None and snap["incidents"][0]["stage"] is None
    assert snap["skipped_lines"] == 2 and snap["curves"]["x"] == [0, 1, 2, 3]


def test_20k_metric_keys_cap_peer_rows_series_and_payload(tmp_path: Path) -> None:
    """Sybil ids in ``dropped/<id>`` and ``success/<k>`` keys: peer rows, kept keys, memory and
    the payload stay bounded; the drops past the cap are still counted."""
    import tracemalloc

    from genrl_swarm.dashboard.hub import Hub

    cap = 256  # runs.MAX_KEYS (dropped/ and success/ keys kept per peer) and view.MAX_REMOTE_PEERS
    rows = [
        row("peer-0", r, **{f"dropped/sybil-{r}-{i}": 1 + (i == 7) for i in range(10_000)}, **{f"success/t{r}-{i}": 1.0 for i in range(10_000)})
        for r in range(2)
    ]
    rows.append(
        row("peer-0", 1, **{f"dropped/sybil-1-{i}": 1 for i in range(10_000)}, **{f"reward/peer/judged-{i}": 0.5 for i in range(1000)})
    )  # round 1 replayed
    write_rows(tmp_path / "run" / "peer-0" / "metrics.jsonl", rows)
    tracemalloc.start()
    hub = Hub(RunWatcher([tmp_path / "run"]))
    hub.refresh(0.0)
    payload = hub.build()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    snap = json.loads(payload)
    assert len(snap["peers"]) == 1 + cap and len(payload) < 1_000_000 and peak < 100_000_000, (len(snap["peers"]), len(payload), peak)
    assert snap["peers_omitted"] == cap - 1  # 256 dropped + 255 scored (the row's 256 reward/peer/ keys include its own): the top 256 by drops kept
    peers = {p["id"]: p for p in snap["peers"]}
    assert peers["sybil-0-7"]["dropped"] == 2 and "peer-0" in peers and not any(i.startswith("judged-") for i in peers)
    log = next(iter(hub.runs.peers.values()))
    assert len(log.dropped_by) == cap and len([k for k in log.series if k.startswith("success/")]) == cap
    assert log.dropped_other == 10_000 + 10_000 - cap  # the rest aggregated, the replaced row's drops taken back


def test_a_huge_snapshot_is_cut_to_the_payload_cap(tmp_path: Path) -> None:
    from genrl_swarm.dashboard import hub as hub_module

    for p in range(20):
        write_rows(tmp_path / "run" / f"peer-{p}" / "metrics.jsonl", [row(f"peer-{p}", r) for r in range(300)])
    hub = hub_module.Hub(RunWatcher([tmp_path / "run"]))
    hub.refresh(0.0)
    full = hub.build()
    hub.max_payload = len(full) // 3
    small = hub.build()
    assert len(small) <= hub.max_payload and len(json.loads(small)["curves"]["x"]) < 300
