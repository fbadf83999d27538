"""The one place payloads become bytes and back.

msgpack through msgspec, decoded straight into ``Envelope[<the game's body type>]``, so a
peer's bytes are schema-checked (field names, types, lengths, dtypes and shapes, ``__post_init__``
invariants) in the same step they are parsed. Every failure is a ``PayloadError``; backends
drop and count it. Decoders come from ``core.decoders``: built once per process, under its lock,
since peer threads building the same one at once crash msgspec (issue 43).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec

from genrl_swarm.comm.epoch import EPOCH_BYTES
from genrl_swarm.core.bodies import Body, Envelope, FaultRecord
from genrl_swarm.core.decoders import envelope_decoder, msgpack_decoder
from genrl_swarm.core.identity import SIGNATURE_BYTES
from genrl_swarm.core.types import FORMAT_VERSION

#: 2 MiB: decoding a payload at the cap stays well under 100 ms (8 MiB of tiny structs took up
#: to 790 ms in bench_fuzz); an LM stage of 64 completions x 512 tokens is about 0.4 MB.
DEFAULT_MAX_BYTES = 2 * 1024 * 1024
#: A signed commitment is a few hundred bytes; anything bigger is not one.
MAX_RECORD_BYTES = 2048
_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]


class PayloadError(ValueError):
    """A payload that cannot be encoded or that a peer sent undecodable, oversized or ill-typed."""


class Codec:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self._encoder = msgspec.msgpack.Encoder()

    def encode(
        self,
        sender: str,
        round: int,
        stage: int,
        bodies: Sequence[Body],
        basis: Sequence[bytes] = (),
        evidence: Sequence[bytes] = (),
        faults: Sequence[FaultRecord] = (),
    ) -> bytes:
        try:
            envelope = Envelope(FORMAT_VERSION, sender, round, stage, tuple(bodies), tuple(basis), tuple(evidence), tuple(faults))
            data = self._encoder.encode(envelope)
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
        try:
            envelope: Envelope[Any] = envelope_decoder(body_type).decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError, RecursionError) as e:
            raise PayloadError(f"bad payload: {str(e)[:300]}") from e
        if envelope.version != FORMAT_VERSION:
            raise PayloadError(f"format version {envelope.version}, this peer speaks {FORMAT_VERSION}")
        return envelope


class ModelRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The model a commitment names (``core.ModelClaim``): the paradigm's name for it and the
    sha256 and size of the bytes a checker fetches to rebuild it."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
    blob: Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]
    size: Annotated[int, msgspec.Meta(ge=0)]


class Commitment(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a peer promises to reveal for (swarm, round, stage): the sha256 and size of its
    payload, published before anyone reveals. A copier cannot commit to a payload it has not
    seen yet, and a record signed for one (swarm, epoch, round, stage) is useless for another
    (``epoch``: the run, see ``comm.epoch``)."""

    swarm: _Name
    epoch: Annotated[bytes, msgspec.Meta(min_length=EPOCH_BYTES, max_length=EPOCH_BYTES)]
    round: Annotated[int, msgspec.Meta(ge=0)]
    stage: Annotated[int, msgspec.Meta(ge=0)]
    sender: _Name
    digest: Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]
    size: Annotated[int, msgspec.Meta(ge=0)]
    account: Annotated[str, msgspec.Meta(max_length=128)] = ""  # the sender's chain account, if any
    #: The model the payload's bodies were drawn with (issue 45.3): signed before anyone reveals,
    #: so a spot check holds the sender to it. None: nothing a receiver can redo.
    model: ModelRecord | None = None


class Signed(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A record and its signer's signature over ``DOMAIN + kind + record``."""

    kind: Literal["commit"]
    record: Annotated[bytes, msgspec.Meta(max_length=MAX_RECORD_BYTES)]
    signature: Annotated[bytes, msgspec.Meta(min_length=SIGNATURE_BYTES, max_length=SIGNATURE_BYTES)]


DOMAIN = b"genrl-swarm/v2/"
_signed_decoder = msgpack_decoder(Signed)
_commitment_decoder = msgpack_decoder(Commitment)


def signed_message(kind: str, record: bytes) -> bytes:
    return DOMAIN + kind.encode() + b"/" + record


def encode_signed(kind: Literal["commit"], record: msgspec.Struct, sign: Any) -> bytes:
    raw = msgspec.msgpack.encode(record)
    return msgspec.msgpack.encode(Signed(kind, raw, sign(signed_message(kind, raw))))


def read_commitment(data: bytes, verify_as: Any) -> Commitment:
    """A commitment another peer passed on (a basis or evidence entry): parsed first, since only
    its record names whose key checks it, then ``verify_as(sender, message, signature)``. Both
    are bounded (``MAX_RECORD_BYTES``); every failure is a PayloadError."""
    try:
        signed = _signed_decoder.decode(data)
        record = _commitment_decoder.decode(signed.record)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as e:
        raise PayloadError(f"bad signed commitment: {str(e)[:200]}") from e
    if not verify_as(record.sender, signed_message(signed.kind, signed.record), signed.signature):
        raise PayloadError(f"a passed-on commitment of {record.sender[:64]} does not verify under its id")
    return record


def open_commitment(data: bytes, verify: Any) -> Commitment:
    """The commitment in ``data`` if ``verify(sender, message, signature)`` accepts it. The
    signature is checked before the record is parsed; every failure is a PayloadError."""
    if not isinstance(data, bytes) or len(data) > MAX_RECORD_BYTES + 256:
        raise PayloadError("not a signed commitment (wrong type or too large)")
    try:
        signed = _signed_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as e:  # ValueError: bad UTF-8
        raise PayloadError(f"bad signed record: {str(e)[:200]}") from e
    if not verify(signed_message(signed.kind, signed.record), signed.signature):
        raise PayloadError("commitment signature does not verify under the sender's id")
    try:
        return _commitment_decoder.decode(signed.record)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as e:
        raise PayloadError(f"bad commitment: {str(e)[:200]}") from e
