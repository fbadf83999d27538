"""What a commitment and a reveal must pass, as verdicts on many (receiver, sender) rows at once.

The order is the transport's (``comm.base``): the commitment's signature and its (swarm, round,
stage, sender) first, before anything is parsed; then its size against the sender's budget;
then whether the payload came by the deadline and matches the commitment byte for byte.
Identical payloads from two senders count for the earlier commitment only. The real transport
computes the inputs with Ed25519 and sha256; the simulator draws them (and charges their CPU
time), and both turn verdicts into the same ``Drop`` kinds for the ``SenderBook``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from genrl_swarm.core.types import Drop, DropKind

Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]


class Verdict(enum.IntEnum):
    OK = 0
    FORGED = 1  # bad signature, another swarm/round/stage/sender, or bytes not as committed
    OVER_BUDGET = 2  # committed to more bytes than trust.max_bytes allows
    LATE = 3  # committed but revealed nothing by the deadline
    COPY = 4  # the same bytes were committed earlier by another sender

    @property
    def kind(self) -> DropKind | None:
        """The ``Drop`` kind the SenderBook counts (None: passed)."""
        return _KINDS[self]


_KINDS = {
    Verdict.OK: None,
    Verdict.FORGED: DropKind.PAYLOAD,
    Verdict.OVER_BUDGET: DropKind.BUDGET,
    Verdict.LATE: DropKind.LATE,
    Verdict.COPY: DropKind.COPY,
}


def classify(signed: Bools, size: Ints, max_bytes: int, revealed: Bools, matches: Bools) -> npt.NDArray[np.int8]:
    """One verdict per row: ``signed`` (the commitment verifies and names this exchange),
    ``size`` (committed bytes), ``revealed`` (a payload came by the deadline), ``matches`` (its
    sha256 and size are the committed ones)."""
    verdict = np.full(len(size), Verdict.OK, dtype=np.int8)
    verdict[~matches] = Verdict.FORGED
    verdict[~revealed] = Verdict.LATE
    verdict[size > max_bytes] = Verdict.OVER_BUDGET
    verdict[~signed] = Verdict.FORGED
    return verdict


def first_committers(group: Ints, digest: Ints, committed: npt.NDArray[np.float64]) -> Bools:
    """False for rows whose digest another row of the same receiver committed to earlier."""
    if not len(group):
        return np.zeros(0, dtype=bool)
    order = np.lexsort((committed, digest, group))
    g, d = group[order], digest[order]
    repeat = np.r_[False, (g[1:] == g[:-1]) & (d[1:] == d[:-1])]
    first = np.ones(len(group), dtype=bool)
    first[order[repeat]] = False
    return first


def drops_of(senders: Sequence[str], verdicts: Sequence[int], stage: int) -> list[Drop]:
    """The drops a receiver records for the rows that did not pass (for ``SenderBook.close_round``)."""
    return [Drop(s, stage, None, _REASONS[v], kind) for s, v in zip(senders, verdicts) if (kind := _KIND_OF[v]) is not None]


_REASONS = {int(v): v.name.lower() for v in Verdict}
_KIND_OF = {int(v): v.kind for v in Verdict}
