"""Typed rollout bodies: what a peer's policy produced, as it crosses the wire.

A game declares one body type (``Policy.body_type``); the codec decodes a peer's bytes straight
into it, so a payload is shape-, dtype- and length-checked in the same step it is parsed.
Structs are ``gc=False`` (they hold no reference cycles): a payload of 100k+ tiny structs would
otherwise trigger full collections whose cost grows with the whole heap (bench_fuzz).
Bounds are static annotations (checked while decoding) plus ``__post_init__`` invariants
(checked before the body reaches any game code). Numeric arrays travel as raw bytes with a
declared dtype and shape, so decoding never allocates more than the payload itself.

Bodies carry what the sender *produced* (token ids, actions, log-probs), never the inputs it
claims to have seen: ``input_digest`` names the stage input, and the receiver compares it with
the input it built itself. Text is derived from ids by the receiver, for display and scoring.
"""

from __future__ import annotations

import math
from functools import reduce
from typing import Annotated, Any, Generic, Literal, TypeVar

import msgspec

#: Static ceilings; games enforce tighter, game-specific limits in ``Policy.check``.
MAX_TOKENS = 1 << 16  # ids in one completion / one turn
MAX_SAMPLES = 1024  # completions of one prompt
MAX_TURNS = 256
MAX_ARRAY_BYTES = 64 << 20
MAX_DIMS = 6
MAX_ID = (1 << 31) - 1
#: Sampled tokens / steps below which identical work from two senders is not called a copy.
MIN_COPY_UNITS = 64

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Digest = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{24}$")]
TokenId = Annotated[int, msgspec.Meta(ge=0, le=MAX_ID)]
TokenIds = Annotated[tuple[TokenId, ...], msgspec.Meta(max_length=MAX_TOKENS)]
LogProbs = Annotated[tuple[float, ...], msgspec.Meta(max_length=MAX_TOKENS)]
Version = Annotated[int, msgspec.Meta(ge=0)]
DType = Literal["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
ITEMSIZE: dict[str, int] = {
    "bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2, "float32": 4, "float64": 8,
}  # fmt: skip


def check_logprobs(values: tuple[float, ...], ids: tuple[Any, ...], what: str) -> None:
    """One finite log-prob <= 0 per item; bodies call it in ``__post_init__`` (so on decode)."""
    if len(values) != len(ids):
        raise ValueError(f"{what}: {len(values)} log-probs for {len(ids)} tokens")
    # sum/max run in C: a NaN or an infinity makes the sum non-finite (payloads hold 10^5 values).
    if values and not (math.isfinite(sum(values)) and max(values) <= 0.0):
        bad = next((v for v in values if not (v <= 0.0 and math.isfinite(v))), values[0])
        raise ValueError(f"{what}: log-prob {bad!r} is not a finite value <= 0")


class Body(msgspec.Struct, frozen=True, gc=False, tag=True, forbid_unknown_fields=True):
    """Base of every body: which task it answers and which stage input it saw (by digest)."""

    task_id: Id
    input_digest: Digest

    #: What one body holds several of, for rewards (completions of a prompt; one episode).
    @property
    def num_samples(self) -> int:
        return 1

    @property
    def units(self) -> int:
        """The work a receiver spends on this body (tokens, steps, samples): what per-sender
        budgets count."""
        return self.num_samples

    def content_key(self) -> bytes | None:
        """What a producer did, as bytes (sampled ids, actions), for spotting a sender that
        re-sends another's work as its own. None for bodies where honest peers often agree
        exactly (a bandit's arm picks): those are never treated as copies."""
        return None


# --------------------------------------------------------------------------- LM tokens
class TokenSample(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """One sampled completion: exactly the ids the policy emitted (EOS included when it stopped
    on one), the behaviour log-prob of each under the sampling distribution, and why it ended."""

    completion_ids: TokenIds
    logprobs: LogProbs
    finish_reason: Literal["stop", "length"]

    def __post_init__(self) -> None:
        check_logprobs(self.logprobs, self.completion_ids, "completion")


class TokenRollout(Body, frozen=True, tag="tokens"):
    """Completions of one prompt by a language model, at the token level."""

    prompt_ids: TokenIds
    samples: Annotated[tuple[TokenSample, ...], msgspec.Meta(min_length=1, max_length=MAX_SAMPLES)]
    policy_version: Version
    tokenizer: Annotated[str, msgspec.Meta(max_length=64)]  # fingerprint: receivers with another drop it

    @property
    def num_samples(self) -> int:
        return len(self.samples)

    @property
    def units(self) -> int:
        return len(self.prompt_ids) + sum(len(x.completion_ids) for x in self.samples)

    def content_key(self) -> bytes | None:
        if sum(len(x.completion_ids) for x in self.samples) < MIN_COPY_UNITS:
            return None  # short answers coincide honestly, and are easy to pre-commit to frame a peer
        return msgspec.msgpack.encode([x.completion_ids for x in self.samples])


# --------------------------------------------------------------------------- arrays / trajectories
class Array(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """A typed n-d array as raw little-endian bytes; the size is checked against dtype x shape
    before anything reads it."""

    dtype: DType
    shape: Annotated[tuple[Annotated[int, msgspec.Meta(ge=0, le=MAX_ARRAY_BYTES)], ...], msgspec.Meta(max_length=MAX_DIMS)]
    data: Annotated[bytes, msgspec.Meta(max_length=MAX_ARRAY_BYTES)]

    def __post_init__(self) -> None:
        expected = reduce(lambda a, b: a * b, self.shape, 1) * ITEMSIZE[self.dtype]
        if expected != len(self.data):
            raise ValueError(f"array of {self.dtype}{list(self.shape)} needs {expected} bytes, got {len(self.data)}")

    @classmethod
    def of(cls, value: Any) -> Array:
        """From a numpy array (or anything ``numpy.asarray`` takes)."""
        import numpy as np

        a = np.ascontiguousarray(value)
        if a.dtype.name not in ITEMSIZE:
            raise ValueError(f"dtype {a.dtype} cannot be sent (use one of {sorted(ITEMSIZE)})")
        return cls(a.dtype.name, tuple(int(d) for d in a.shape), a.astype(a.dtype.newbyteorder("<")).tobytes())  # type: ignore[arg-type]

    def numpy(self) -> Any:
        """A read-only numpy view of the bytes (no copy)."""
        import numpy as np

        return np.frombuffer(self.data, dtype=np.dtype(self.dtype).newbyteorder("<")).reshape(self.shape)


class ArraySpec(msgspec.Struct, frozen=True):
    """What one trajectory field must be: dtype and the shape of one step."""

    dtype: DType
    step_shape: tuple[int, ...] = ()


B = TypeVar("B", bound=Body)


#: Earlier-stage payloads a later-stage input may be built from: game.max_sources senders x the
#: earlier stages (GameConfig keeps every honest config within it: 16 sources, up to 17 stages).
MAX_BASIS = 256
#: Signed commitments one payload may carry as evidence of others' equivocation (pairs).
MAX_EVIDENCE = 16
#: A signed commitment record and its signature (comm.codec.MAX_RECORD_BYTES plus framing).
SignedRecord = Annotated[bytes, msgspec.Meta(max_length=2304)]
#: Failed spot checks one payload may pass on (``Envelope.faults``).
MAX_FAULTS = 8


class FaultRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A failed spot check on the wire: the accused's signed commitment (naming its payload and
    its model) and the index of the body in that payload its model does not draw."""

    commitment: SignedRecord
    body: Annotated[int, msgspec.Meta(ge=0, lt=4096)]


class Envelope(msgspec.Struct, Generic[B], frozen=True, forbid_unknown_fields=True):
    """The unit on the wire: one peer's bodies for one (round, stage). Decoded as
    ``Envelope[GameBody]``: a body of another type is a schema error, not a surprise later.

    ``basis``: the signed commitments of the earlier-stage payloads (this round) the sender built
    this stage's inputs from, so a receiver holding them rebuilds the same inputs; ``evidence``:
    pairs of signed commitments by one sender for one (round, stage) that differ (equivocation);
    ``faults``: failed spot checks (``FaultRecord``), re-checked by every peer that reads them."""

    version: int
    sender: Id
    round: Annotated[int, msgspec.Meta(ge=0)]
    stage: Annotated[int, msgspec.Meta(ge=0, le=1024)]
    bodies: Annotated[tuple[B, ...], msgspec.Meta(max_length=4096)]
    basis: Annotated[tuple[SignedRecord, ...], msgspec.Meta(max_length=MAX_BASIS)] = ()
    evidence: Annotated[tuple[SignedRecord, ...], msgspec.Meta(max_length=MAX_EVIDENCE)] = ()
    faults: Annotated[tuple[FaultRecord, ...], msgspec.Meta(max_length=MAX_FAULTS)] = ()
