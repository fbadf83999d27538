"""The metric picker's data: the numeric keys the peers log, and one key's curves on request.

The snapshot lists the keys (``metric_keys``); the page asks ``/api/metric?key=...`` for the one
picked, so a tick never carries every key's series. A key is text from a peer's file: it is
only ever compared with the listed keys and used to look values up, never interpreted, and the
curves keep the per-chart value budget (``view.VALUE_BUDGET``) like the snapshot's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from genrl_swarm.dashboard.downsample import buckets, series
from genrl_swarm.dashboard.runs import MAX_KEY_LEN, PeerLog
from genrl_swarm.dashboard.view import VALUE_BUDGET, namer
from genrl_swarm.run.events import clip

MAX_LISTED = 512  # keys offered across all peers (sorted: the first MAX_LISTED)


def metric_keys(logs: Sequence[PeerLog]) -> list[str]:
    """Every key some peer logs a number under (kept and bounded by ``runs.PeerLog``), sorted."""
    keys: set[str] = set()
    for log in logs:
        keys |= log.pickable
    return sorted(keys)[:MAX_LISTED]


def valid_key(key: str, listed: frozenset[str]) -> bool:
    """Whether ``key`` (from the request) is one of the listed keys; nothing else is looked up."""
    return 0 < len(key) <= MAX_KEY_LEN and key in listed


def metric_curves(logs: Sequence[PeerLog], key: str, max_points: int) -> dict[str, Any]:
    """``key`` per peer (named as in the snapshot: ``<run>/<id>`` when several runs are watched)
    and its mean over the peers of each run (one mean per run: two runs are never merged), on
    the rounds where some peer logged it, cut to at most ``max_points`` buckets."""
    name = namer(logs)
    values = {log.directory: {r: row[key] for r, row in log.rows.items() if key in row} for log in logs}
    rounds = sorted({r for v in values.values() for r in v})
    runs = sorted({log.run for log in logs})
    share = max(16, min(max_points, VALUE_BUDGET // max(1, len(logs) + len(runs))))
    groups = buckets(rounds, share)
    peers = {name(log.run, log.peer): series(values[log.directory], groups) for log in logs if values[log.directory]}
    means: dict[str, list[float | None]] = {}
    for run in runs:
        pooled: defaultdict[int, list[float]] = defaultdict(list)
        for log in logs:
            if log.run == run:
                for r, v in values[log.directory].items():
                    pooled[r].append(v)
        if pooled:
            label = "swarm mean" if len(runs) == 1 else clip(f"{run} mean")
            means[label] = series({r: sum(v) / len(v) for r, v in pooled.items()}, groups)
    return {"key": key, "x": [g[0] for g in groups], "peers": peers, "means": means}
