"""A swarm of one: the loop runs unchanged, the exchange returns only this peer's rollouts."""

from __future__ import annotations

from collections.abc import Collection

from genrl_swarm.comm.base import ByteBackend, Phase, RawExchange
from genrl_swarm.comm.codec import DEFAULT_MAX_BYTES


class NullBackend(ByteBackend):
    in_process = False  # a swarm of one: one peer per process, whatever swarm.num_peers says

    def __init__(self, peer_id: str = "peer-0", max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        super().__init__(max_bytes)
        self._peer_id = peer_id

    @property
    def peer_id(self) -> str:
        return self._peer_id

    def _exchange_bytes(
        self, round: int, stage: int, phase: Phase, data: bytes, timeout: float, wait_for: Collection[str] | None = None
    ) -> RawExchange:
        return RawExchange({}, expected=1)
