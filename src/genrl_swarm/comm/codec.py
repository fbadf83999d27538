"""The one place payloads become bytes and back.

msgpack through msgspec, decoded straight into ``Envelope[<the game's body type>]``, so a
peer's bytes are schema-checked (field names, types, lengths, dtypes and shapes, ``__post_init__``
invariants) in the same step they are parsed. Every failure is a ``PayloadError``; backends
drop and count it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from genrl_swarm.core.bodies import Body, Envelope
from genrl_swarm.core.types import FORMAT_VERSION

DEFAULT_MAX_BYTES = 8 * 1024 * 1024


class PayloadError(ValueError):
    """A payload that cannot be encoded or that a peer sent undecodable, oversized or ill-typed."""


class Codec:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self._encoder = msgspec.msgpack.Encoder()
        self._decoders: dict[type[Body], Any] = {}

    def encode(self, sender: str, round: int, stage: int, bodies: Sequence[Body]) -> bytes:
        try:
            data = self._encoder.encode(Envelope(FORMAT_VERSION, sender, round, stage, tuple(bodies)))
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as e:
            raise PayloadError(f"cannot encode bodies of {sender} r{round}/s{stage}: {e}") from e
        if len(data) > self.max_bytes:
            raise PayloadError(
                f"payload of {sender} r{round}/s{stage} is {len(data)} bytes, over the limit of "
                f"{self.max_bytes} (raise communication.max_bytes or share fewer rollouts)"
            )
        return data

    def decode(self, data: bytes, body_type: type[Body] = Body) -> Envelope[Any]:
        """An envelope whose bodies are all ``body_type``; anything else is a PayloadError."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise PayloadError(f"payload is {type(data).__name__}, not bytes")
        if len(data) > self.max_bytes:
            raise PayloadError(f"payload of {len(data)} bytes is over the limit of {self.max_bytes}")
        decoder = self._decoders.get(body_type)
        if decoder is None:
            decoder = self._decoders[body_type] = msgspec.msgpack.Decoder(Envelope[body_type])  # type: ignore[valid-type]
        try:
            envelope: Envelope[Any] = decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError, RecursionError) as e:
            raise PayloadError(f"bad payload: {str(e)[:300]}") from e
        if envelope.version != FORMAT_VERSION:
            raise PayloadError(f"format version {envelope.version}, this peer speaks {FORMAT_VERSION}")
        return envelope
