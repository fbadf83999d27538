"""The server's one loop: poll the sources, rebuild the snapshot when something changed, and
wake every open event stream.

Polling is bounded: the run folders are stat-ed every ``interval`` seconds (a few hundred stat
calls for 100 peers), the chain and status endpoints every ``remote_interval``; a snapshot is
built at most once per ``min_push`` seconds however fast a run writes, and encoded once for all
clients. Readers block (files, HTTP), so they run in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from genrl_swarm.dashboard.chain import ChainStandings
from genrl_swarm.dashboard.metric import metric_curves, metric_keys, valid_key
from genrl_swarm.dashboard.runs import RunWatcher
from genrl_swarm.dashboard.status import StatusPoller
from genrl_swarm.dashboard.view import snapshot
from genrl_swarm.run.events import clip

log = logging.getLogger(__name__)
HEARTBEAT = 15.0  # seconds between keep-alive comments on an idle stream
MAX_PAYLOAD = 8 << 20  # bytes of one snapshot: past it, curves get fewer points, then peers are cut


@dataclass
class Hub:
    runs: RunWatcher
    chain: ChainStandings | None = None
    status: StatusPoller | None = None
    max_points: int = 400
    interval: float = 0.5
    remote_interval: float = 5.0
    min_push: float = 1.0
    idle_rebuild: float = 30.0  # seconds: rebuilt this often even when nothing changed, so a run that stopped writing reads as stopped
    max_payload: int = MAX_PAYLOAD
    version: int = 0
    payload: bytes = b"{}"
    _chain_state: dict[str, Any] | None = None
    _statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    _status_errors: list[str] = field(default_factory=list)
    _remote_at: float = float("-inf")
    _rebuilt_at: float = float("-inf")
    _changed: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    closing: bool = False
    _failures: set[str] = field(default_factory=set)  # kinds of refresh failure already logged
    metric_names: frozenset[str] = frozenset()  # the keys the last snapshot offered the metric picker
    _metric_cache: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # key -> (version, payload)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the logs: polled, snapshotted and asked for a metric from threads

    def refresh(self, now: float) -> bool:
        """One poll of every source (blocking); True when the snapshot must be rebuilt."""
        with self._lock:
            changed = self.runs.poll()
        if now - self._remote_at >= self.remote_interval and (self.chain or self.status):
            self._remote_at = now
            if self.chain is not None:
                self._chain_state = self.chain.read()
            if self.status is not None:
                self._statuses, self._status_errors = self.status.read()
            changed = True
        if changed or now - self._rebuilt_at >= self.idle_rebuild:
            self._rebuilt_at, changed = now, True
        return changed or self.version == 0

    def build(self) -> bytes:
        """The snapshot, encoded; over ``max_payload`` bytes it is rebuilt with half the curve
        points (down to 16), then the peer table is cut (``truncated``: the peers left out)."""
        with self._lock:
            return self._build()

    def _build(self) -> bytes:
        points = self.max_points
        keys = metric_keys(list(self.runs.peers.values()))
        self.metric_names = frozenset(keys)
        while True:
            data = snapshot(
                list(self.runs.peers.values()),
                max_points=points,
                statuses=self._statuses,
                chain=self._chain_state,
                runs=[str(p) for p in self.runs.run_dirs],
            )
            data |= {"version": self.version + 1, "time": round(time.time(), 3), "status_errors": self._status_errors, "metrics": keys}
            payload = self._encode(data)
            if len(payload) <= self.max_payload or points <= 16:
                break
            points = max(16, points // 2)
        peers = data["peers"]
        while len(payload) > self.max_payload and data["peers"]:
            keep = len(data["peers"]) * self.max_payload // len(payload) * 9 // 10
            data["peers"], data["truncated"] = peers[:keep], len(peers) - keep
            if len(payload := self._encode(data)) > self.max_payload and not keep:
                data["curves"] = {"x": [], "reward": {}, "swarm_mean": []}
                data["incidents"] = data["leaderboard"] = []
                payload = self._encode(data)
                break
        return payload

    def metric(self, key: str) -> bytes | None:
        """One metric's curves (``metric.metric_curves``), encoded; None when ``key`` is not one
        the snapshot listed. Computed at most once per snapshot version and key (blocking)."""
        if not valid_key(key, self.metric_names):
            return None
        version = self.version
        cached = self._metric_cache.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        with self._lock:
            payload = self._encode(metric_curves(list(self.runs.peers.values()), key, self.max_points) | {"version": version})
        if len(self._metric_cache) >= 32:
            self._metric_cache.clear()
        self._metric_cache[key] = (version, payload)
        return payload

    @staticmethod
    def _encode(data: dict[str, Any]) -> bytes:
        return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()

    async def run(self) -> None:
        """Forever: poll, rebuild at most every ``min_push`` seconds, wake the streams."""
        self._changed, self._loop = asyncio.Event(), asyncio.get_running_loop()
        pending, last_push = False, float("-inf")
        while True:
            try:
                now = time.monotonic()
                pending |= await asyncio.to_thread(self.refresh, now)
                if pending and now - last_push >= self.min_push:
                    self.payload = await asyncio.to_thread(self.build)
                    self.version += 1
                    pending, last_push = False, now
                    self._changed.set()
                    self._changed = asyncio.Event()
            except Exception as e:  # noqa: BLE001 - an unreadable file, a bad row, a bug: the last good snapshot stays, retried
                kind = type(e).__name__
                if kind not in self._failures:  # once per kind: a failure that repeats every 0.5 s must not flood the log
                    self._failures.add(kind)
                    log.warning("dashboard refresh failed (%s, shown once; the last good snapshot is served): %s", kind, clip(str(e), 500))
            await asyncio.sleep(0 if self.runs.behind else self.interval)

    def close(self) -> None:
        """End every open stream (from any thread): the server can then stop at once instead
        of waiting out its graceful-shutdown timeout on streams that never end by themselves."""
        self.closing = True
        if self._loop is not None and self._changed is not None:
            self._loop.call_soon_threadsafe(self._changed.set)

    async def stream(self, is_disconnected: Any) -> AsyncIterator[bytes]:
        """Server-sent events: the current snapshot at once, then each new one."""
        sent = -1
        while not self.closing and not await is_disconnected():
            if self.version != sent and self.version > 0:
                sent = self.version
                yield b"event: snapshot\nid: " + str(sent).encode() + b"\ndata: " + self.payload + b"\n\n"
                continue
            waiter = self._changed
            if waiter is None:
                await asyncio.sleep(0.1)
                continue
            try:
                await asyncio.wait_for(waiter.wait(), HEARTBEAT)
            except asyncio.TimeoutError:
                yield b": keep-alive\n\n"
