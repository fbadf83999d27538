"""The one place payloads become bytes and back.

msgpack through msgspec, decoded straight into the ``Envelope``/``Rollout`` dataclasses, so
a peer's bytes are schema-checked (field names, types, ``__post_init__`` invariants) in the
same step they are parsed. Every failure is a ``PayloadError``; backends drop and count it.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from genrl_swarm.core.types import FORMAT_VERSION, Envelope, Rollout

DEFAULT_MAX_BYTES = 8 * 1024 * 1024


class PayloadError(ValueError):
    """A payload that cannot be encoded or that a peer sent undecodable, oversized or ill-typed."""


class Codec:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(type=Envelope)

    def encode(self, sender: str, round: int, stage: int, rollouts: Sequence[Rollout]) -> bytes:
        try:
            envelope = Envelope(FORMAT_VERSION, sender, round, stage, tuple(rollouts))
            data = self._encoder.encode(envelope)
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as e:
            raise PayloadError(f"cannot encode rollouts of {sender} r{round}/s{stage}: {e}") from e
        if len(data) > self.max_bytes:
            raise PayloadError(
                f"payload of {sender} r{round}/s{stage} is {len(data)} bytes, over the limit of "
                f"{self.max_bytes} (raise communication.max_bytes or share fewer rollouts)"
            )
        return data

    def decode(self, data: bytes) -> Envelope:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise PayloadError(f"payload is {type(data).__name__}, not bytes")
        if len(data) > self.max_bytes:
            raise PayloadError(f"payload of {len(data)} bytes is over the limit of {self.max_bytes}")
        try:
            return self._decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as e:
            raise PayloadError(f"bad payload: {e}") from e
