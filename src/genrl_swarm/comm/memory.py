"""Several peers in one process (threads): for tests, notebooks and the demo.

Payloads still go through the codec, so a game that works here works on the wire.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from genrl_swarm.comm.base import ByteBackend, RawExchange
from genrl_swarm.comm.codec import DEFAULT_MAX_BYTES
from genrl_swarm.core.interfaces import Communication


class InMemorySwarm:
    """The shared board peers post to; one condition variable wakes the waiters."""

    def __init__(self, keep_rounds: int = 4) -> None:
        self.members: set[str] = set()
        self._boards: dict[tuple[int, int], dict[str, bytes]] = {}
        self._cond = threading.Condition()
        self._keep_rounds = keep_rounds
        self._interrupted = False

    def join(self, peer_id: str) -> None:
        with self._cond:
            if peer_id in self.members:
                raise ValueError(f"peer id {peer_id!r} is already in this swarm")
            self.members.add(peer_id)

    def leave(self, peer_id: str) -> None:
        with self._cond:
            self.members.discard(peer_id)
            self._cond.notify_all()

    def post(self, round: int, stage: int, sender: str, data: bytes) -> None:
        """Publish bytes; tests also use it to play a misbehaving peer."""
        with self._cond:
            self._boards.setdefault((round, stage), {})[sender] = data
            for key in [k for k in self._boards if k[0] < round - self._keep_rounds]:
                del self._boards[key]
            self._cond.notify_all()

    def interrupt(self) -> None:
        """End every wait now and from now on (the run is stopping)."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    def collect(self, round: int, stage: int, timeout: float) -> dict[str, bytes]:
        """Wait until every member posted for (round, stage), the deadline, or an interrupt."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                board = self._boards.get((round, stage), {})
                remaining = deadline - time.monotonic()
                if self.members <= board.keys() or remaining <= 0 or self._interrupted:
                    return dict(board)
                self._cond.wait(remaining)


class InMemoryBackend(ByteBackend):
    in_process = True

    def __init__(self, swarm: InMemorySwarm, peer_id: str, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        super().__init__(max_bytes)
        self.swarm, self._peer_id = swarm, peer_id
        swarm.join(peer_id)

    @classmethod
    def spawn(cls, num_peers: int, **kwargs: Any) -> list[Communication]:
        swarm = InMemorySwarm()
        return [cls(swarm, f"peer-{i}", **kwargs) for i in range(num_peers)]

    @property
    def peer_id(self) -> str:
        return self._peer_id

    def _exchange_bytes(self, round: int, stage: int, data: bytes, timeout: float) -> RawExchange:
        self.swarm.post(round, stage, self.peer_id, data)
        return RawExchange(self.swarm.collect(round, stage, timeout), expected=len(self.swarm.members))

    def interrupt(self) -> None:
        self.swarm.interrupt()

    def close(self) -> None:
        self.swarm.leave(self.peer_id)
