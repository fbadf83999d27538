"""The metric picker's data: the numeric keys the peers log, and one key's curves on request.

The snapshot lists the keys (``metric_keys``); the page asks ``/api/metric?key=...`` for the one
picked, so a tick never carries every key's series. A key is text from a peer's file: it is
only ever compared with the listed keys and used to look values up, never interpreted, and the
curves keep the per-chart value budget (``view.VALUE_BUDGET``) like the snapshot's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from genrl_swarm.dashboard.runs import MAX_KEY_LEN, PeerLog
from genrl_swarm.dashboard.view import peer_curves

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
    """``key`` per peer and its mean over the peers of each run (``view.peer_curves``), on the
    rounds where some peer logged it."""
    values = {log.directory: {r: row[key] for r, row in log.rows.items() if key in row} for log in logs}
    return {"key": key, **peer_curves(logs, values, max_points)}
