"""The payloads a peer holds, by digest: what other peers fetch when their views differ.

A later-stage payload names the earlier payloads its inputs were built from (``Envelope.basis``);
a receiver that lacks one fetches it by its signed digest (``core.views``). Every peer keeps the
payloads it revealed and every one it received that matched its commitment, for this round and
the one before (a later stage only names payloads of its own round; a peer a round behind still
asks), and serves them to whoever asks by digest.

Served only once revealed: this peer's own payload enters the store after its reveal phase, so
its digest, public from the commitment on, cannot be used to read it before the commit phase has
closed (a copier would commit to it as its own). Received payloads were revealed by their senders.
"""

from __future__ import annotations

import hashlib
import threading

#: Rounds a payload is served after the round it belongs to (this one and the one before).
HELD_ROUNDS = 2


class HeldPayloads:
    """sha256 -> payload, for the last ``HELD_ROUNDS`` rounds; thread-safe (a transport serves it
    from its own thread or event loop while the peer's thread adds to it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_digest: dict[bytes, tuple[int, bytes]] = {}

    def put(self, round: int, payload: bytes) -> None:
        digest = hashlib.sha256(payload).digest()
        with self._lock:
            self._by_digest[digest] = (round, payload)
            for old in [d for d, (r, _) in self._by_digest.items() if r <= round - HELD_ROUNDS]:
                del self._by_digest[old]

    def get(self, digest: bytes) -> bytes | None:
        with self._lock:
            held = self._by_digest.get(digest)
        return held[1] if held is not None else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_digest)
