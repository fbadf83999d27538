"""The console view: one table row per round once every local peer finished it."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from genrl_swarm.core.game import GameManager
from genrl_swarm.core.types import RoundResult

SHORT = 12  # ids longer than this are shown as their first and last characters


def short_ids(peer_ids: list[str]) -> dict[str, str]:
    """A column label per peer: a libp2p id (52 characters) as ``12D3Ko…x9Qa``, with as many
    trailing characters as it takes to tell this table's peers apart."""
    if all(len(p) <= SHORT for p in peer_ids):
        return {p: p for p in peer_ids}
    for tail in range(4, max(len(p) for p in peer_ids) + 1):
        labels = {p: p if len(p) <= SHORT or len(p) <= 6 + tail + 1 else f"{p[:6]}…{p[-tail:]}" for p in peer_ids}
        if len(set(labels.values())) == len(peer_ids):
            return labels
    return {p: p for p in peer_ids}


class ConsoleTable:
    """Shared by the peers of this process; prints each peer's own reward per round."""

    def __init__(self, peer_ids: list[str], max_rounds: int, stream: TextIO | None = None) -> None:
        self.peer_ids, self.max_rounds = peer_ids, max_rounds
        self.labels = short_ids(peer_ids)
        self.stream = stream or sys.stdout
        self._pending: dict[int, dict[str, RoundResult]] = {}
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._header_done = False

    def __call__(self, manager: GameManager, result: RoundResult) -> None:
        with self._lock:
            row = self._pending.setdefault(result.round, {})
            row[result.peer_id] = result
            if len(row) == len(self.peer_ids):
                self._print(result.round, self._pending.pop(result.round))

    def _print(self, r: int, row: dict[str, RoundResult]) -> None:
        width = max(8, *(len(label) for label in self.labels.values()))
        if not self._header_done:
            cols = "".join(f"{self.labels[p]:>{width + 2}}" for p in self.peer_ids)
            print(f"{'round':>7}{cols}   winner       dropped  quarantined  elapsed", file=self.stream)
            self._header_done = True
        cells = "".join(f"{row[p].rewards.get(p, float('nan')):>{width + 2}.3f}" for p in self.peer_ids)
        winner = [self.labels.get(w) or short_ids([w])[w] for w in next(iter(row.values())).winners[:1]]
        elapsed = time.monotonic() - self._start
        done = f"{r + 1}/{self.max_rounds}"
        # Summed over this process's peers: bodies/payloads refused this round, and senders
        # the peers are ignoring (each peer keeps its own quarantine list).
        dropped = sum(sum(res.dropped.values()) for res in row.values())
        quarantined = max(int(res.metrics.get("trust/quarantined", 0)) for res in row.values())
        print(f"{done:>7}{cells}   {(winner or ('-',))[0]:<12} {dropped:>7}  {quarantined:>11}  {elapsed:6.1f}s", file=self.stream, flush=True)
