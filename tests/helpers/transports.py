"""Transports for the launcher's tests, loaded by Hydra target (``helpers.transports.X``)."""

from __future__ import annotations

from collections.abc import Collection
from typing import ClassVar

from genrl_swarm.comm.base import ByteBackend, Phase, RawExchange
from genrl_swarm.comm.codec import DEFAULT_MAX_BYTES


class Minimal(ByteBackend):
    """Only what a transport must write: its peer id and how bytes move (a swarm of one).
    Everything the launcher asks beyond that comes from ByteBackend's defaults."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        super().__init__(max_bytes)

    @property
    def peer_id(self) -> str:
        return "solo"

    def _exchange_bytes(
        self, round: int, stage: int, phase: Phase, data: bytes, timeout: float, wait_for: Collection[str] | None = None
    ) -> RawExchange:
        return RawExchange({}, expected=1)


class Declaring(Minimal):
    """Declares the whole launcher surface: a rank, a join line, and where it resumes."""

    resumed: ClassVar[list[int]] = []

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        super().__init__(max_bytes)
        self.rank = 7

    def announce(self) -> str:
        return "--initial-peers /ip4/127.0.0.1/tcp/1/p2p/solo"

    def resume_at(self, round: int) -> None:
        Declaring.resumed.append(round)
