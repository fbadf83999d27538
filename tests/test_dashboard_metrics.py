"""The metric picker: every numeric key a peer logs is offered (bounded, never cut), the picked
one comes per peer and as each run's mean from /api/metric (downsampled like the other curves,
an unlisted key a 404), and the page plots the picked key for two runs without merging them."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from genrl_swarm.dashboard.metric import metric_curves, metric_keys
from genrl_swarm.dashboard.runs import MAX_KEY_LEN, MAX_METRICS, RunWatcher
from test_dashboard_data import write_rows

EVIL = '<img src=x onerror="window.__pwned=1">'


def game_row(peer: str, r: int, score: float, **extra: Any) -> dict[str, Any]:
    return {"round": r, "peer": peer, "reward/own": 0.0, "reward/cumulative": 0.0, "wins": 0, "game/score": score, "train/loss": 1 / (r + 1), **extra}


def two_runs(root: Path, rounds: int = 4) -> list[Path]:
    """alpha: peer-0 scores r, peer-1 scores 2r; beta: peer-0 scores 10 + r (the same peer ids)."""
    for r in range(rounds):
        write_rows(root / "alpha" / "peer-0" / "metrics.jsonl", [game_row("peer-0", r, r)])
        write_rows(root / "alpha" / "peer-1" / "metrics.jsonl", [game_row("peer-1", r, 2 * r)])
        write_rows(root / "beta" / "peer-0" / "metrics.jsonl", [game_row("peer-0", r, 10 + r)])
    return [root / "alpha", root / "beta"]


def test_every_numeric_key_is_offered_bounded_and_never_cut(tmp_path: Path) -> None:
    peer = tmp_path / "run" / "peer-0" / "metrics.jsonl"
    long_key = "game/" + "x" * MAX_KEY_LEN
    write_rows(
        peer,
        [
            game_row(
                "peer-0",
                0,
                1.0,
                **{"dropped/far": 1, "reward/peer/far": 0.5, "time/generate_s0": 0.2, "note": "text", "flag": True, long_key: 1.0, EVIL: 3.0},
            )
        ],
    )
    write_rows(peer, [{"round": 1, "peer": "peer-0", **{f"extra/{i:04d}": i for i in range(3 * MAX_METRICS)}}])
    watcher = RunWatcher([tmp_path / "run"])
    watcher.poll()
    keys = metric_keys(list(watcher.peers.values()))
    assert {"game/score", "train/loss", "reward/own", "wins", "time/generate_s0", EVIL} <= set(keys)
    assert not {"round", "peer", "note", "flag", long_key, "dropped/far", "reward/peer/far"} & set(
        keys
    )  # text, bools, per-sender families, over-long
    extra = [k for k in keys if k.startswith("extra/")]
    assert 0 < len(extra) <= MAX_METRICS and len(keys) <= 2 * MAX_METRICS  # a flood of new keys is capped per peer
    assert extra == [f"extra/{i:04d}" for i in range(len(extra))]  # the first seen are kept


def test_two_runs_curves_stay_apart_with_one_mean_per_run(tmp_path: Path) -> None:
    watcher = RunWatcher(two_runs(tmp_path))
    watcher.poll()
    logs = list(watcher.peers.values())
    curves = metric_curves(logs, "game/score", max_points=100)
    assert curves["x"] == [0, 1, 2, 3]
    assert curves["peers"] == {"alpha/peer-0": [0, 1, 2, 3], "alpha/peer-1": [0, 2, 4, 6], "beta/peer-0": [10, 11, 12, 13]}
    assert curves["means"] == {"alpha mean": [0, 1.5, 3, 4.5], "beta mean": [10, 11, 12, 13]}
    alone = metric_curves([log for log in logs if log.run == "alpha"], "game/score", max_points=100)
    assert list(alone["peers"]) == ["peer-0", "peer-1"] and alone["means"] == {"swarm mean": [0, 1.5, 3, 4.5]}
    assert metric_curves(logs, "not/logged", max_points=100) == {"key": "not/logged", "x": [], "peers": {}, "means": {}}


def test_a_long_run_is_downsampled_within_the_value_budget(tmp_path: Path) -> None:
    for p in range(50):
        write_rows(tmp_path / "run" / f"peer-{p}" / "metrics.jsonl", [game_row(f"peer-{p}", r, r % 10) for r in range(2000)])
    watcher = RunWatcher([tmp_path / "run"])
    watcher.poll()
    curves = metric_curves(list(watcher.peers.values()), "game/score", max_points=200)
    assert len(curves["x"]) == 200 and curves["x"][:2] == [0, 10]  # 2000 rounds in 200 buckets of 10
    assert {len(v) for v in curves["peers"].values()} == {200} and curves["means"]["swarm mean"][0] == 4.5
    assert sum(len(v) for v in curves["peers"].values()) <= 60_000


def get(url: str, path: str) -> tuple[int, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.request("GET", path)
    response = conn.getresponse()
    return response.status, response.read()


def test_the_endpoint_answers_only_for_listed_keys_and_needs_the_token(tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from genrl_swarm.dashboard.background import Background
    from genrl_swarm.dashboard.hub import Hub

    token = "metric-token-0123456789"
    with Background(Hub(RunWatcher(two_runs(tmp_path)), interval=0.05, min_push=0.05), token=token) as url:
        deadline = time.monotonic() + 60  # the first snapshot is built once the server polled the runs
        while "game/score" not in json.loads(get(url, f"/api/snapshot?token={token}")[1]).get("metrics", []):
            assert time.monotonic() < deadline, "no snapshot listing game/score"
            time.sleep(0.05)
        assert "game/score" not in json.dumps(json.loads(get(url, f"/api/snapshot?token={token}")[1])["curves"])  # asked for, not pushed
        status, body = get(url, f"/api/metric?token={token}&key={quote('game/score', safe='')}")
        assert status == 200
        curves = json.loads(body)
        assert curves["key"] == "game/score" and set(curves["peers"]) == {"alpha/peer-0", "alpha/peer-1", "beta/peer-0"}
        assert get(url, f"/api/metric?key={quote('game/score', safe='')}")[0] == 401
        for key in ("__class__", "game/score'; drop", "x" * 10_000, "", EVIL):
            status, body = get(url, f"/api/metric?token={token}&key={quote(key, safe='')}")
            assert status == 404, key
            assert not key or key.encode() not in body  # never echoed back
