"""ByteBackend: the shared half of every backend.

A backend only moves opaque bytes (``_exchange_bytes``); encoding, validation, identity
checks and dropping bad payloads happen here once, so all backends treat peers the same.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from genrl_swarm.comm.codec import DEFAULT_MAX_BYTES, Codec, PayloadError
from genrl_swarm.core.bodies import Body
from genrl_swarm.core.interfaces import Communication, ExchangeResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RawExchange:
    """What a transport collected: sender id (as the transport authenticated it) -> bytes."""

    payloads: dict[str, bytes]
    expected: int | None = None


class ByteBackend(Communication):
    #: True for backends whose whole swarm lives in this process (in-memory, null): under
    #: torchrun the launcher swaps them for the torch backend, one peer per rank.
    in_process: ClassVar[bool] = False

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.codec = Codec(max_bytes)
        self.dropped_total = 0  # bad payloads over this backend's life

    @classmethod
    def spawn(cls, num_peers: int, **kwargs: Any) -> list[Communication]:
        """Create the peers this process hosts. One, unless the backend is in-process."""
        if num_peers != 1:
            raise ValueError(f"{cls.__name__} hosts one peer per process (swarm.num_peers={num_peers})")
        return [cls(**kwargs)]

    @abstractmethod
    def _exchange_bytes(self, round: int, stage: int, data: bytes, timeout: float) -> RawExchange:
        """Publish ``data`` and collect the other peers' bytes for (round, stage) within ``timeout``."""

    def exchange(
        self, round: int, stage: int, bodies: Sequence[Body], timeout: float, body_type: type[Body] = Body
    ) -> ExchangeResult:
        data = self.codec.encode(self.peer_id, round, stage, bodies)
        raw = self._exchange_bytes(round, stage, data, timeout)
        received: dict[str, tuple[Body, ...]] = {self.peer_id: tuple(bodies)}
        dropped: dict[str, str] = {}
        for sender, blob in raw.payloads.items():
            if sender == self.peer_id:
                continue
            try:
                envelope = self.codec.decode(blob, body_type)
                if (envelope.sender, envelope.round, envelope.stage) != (sender, round, stage):
                    raise PayloadError(
                        f"envelope says {envelope.sender} r{envelope.round}/s{envelope.stage}, "
                        f"transport says {sender} r{round}/s{stage}"
                    )
            except PayloadError as e:
                dropped[sender] = str(e)
                log.warning("%s dropped payload from %s (r%d/s%d): %s", self.peer_id, sender, round, stage, e)
                continue
            received[sender] = envelope.bodies
        self.dropped_total += len(dropped)
        return ExchangeResult(received, dropped, raw.expected)
