"""Deadlines of one exchange and when each of its two phases ends.

A phase asks its candidates for one slot (commitments, then payloads) and ends at the earliest
of: ``needed`` answers with data are in, every candidate answered (with data or for good: gone,
unreachable, left the view), or the deadline. The functions take one row per (receiver,
candidate) pair, so the simulator settles 100,000 pulls in one call; the transport's puller is
the same rule in I/O form (it stops at ``needed`` answers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

#: Share of an exchange's timeout kept for the reveal phase: a member that never commits must
#: not eat the whole deadline and make honest peers' reveals look late. Every transport's
#: exchange (``comm.base``) and the simulator read this one value.
REVEAL_SHARE = 0.25
Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
T = TypeVar("T", float, Floats)


@dataclass(frozen=True)
class Deadlines(Generic[T]):
    """When the commit phase and the whole exchange must end, for an exchange begun at ``start``
    (one time, or an array of them: one per receiver)."""

    commit: T
    reveal: T

    @staticmethod
    def of(start: T, timeout: float) -> Deadlines[T]:
        return Deadlines(start + (1 - REVEAL_SHARE) * timeout, start + timeout)


def collect(group: Ints, arrival: Floats, ok: Bools, needed: Ints, start: Floats, deadline: Floats) -> tuple[Bools, Floats]:
    """Which rows a phase keeps, and when it ends for each receiver.

    ``group``: the receiver of each row (0..G-1); ``arrival``: when the candidate's answer came
    (inf: never); ``ok``: it carried data (False: a definitive no); ``needed``, ``start``,
    ``deadline``: per receiver. A row is kept if it brought data by its receiver's end."""
    groups = len(needed)
    end_needed = np.full(groups, np.inf)
    end_needed[needed <= 0] = -np.inf
    end_all = np.full(groups, -np.inf)  # a receiver without candidates is done at once
    if len(group):
        order = np.lexsort((arrival, group))
        g, t, o = group[order], arrival[order], ok[order].astype(np.int64)
        firsts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        counts = np.diff(np.r_[firsts, len(g)])
        total = np.cumsum(o)
        within = total - np.repeat(total[firsts] - o[firsts], counts)
        hit = (o == 1) & (within == needed[g])
        end_needed[g[hit]] = t[hit]
        end_all[g[firsts]] = np.maximum.reduceat(t, firsts)
    end = np.maximum(start, np.minimum(deadline, np.minimum(end_needed, end_all)))
    kept = ok & (arrival <= end[group])  # no rows: an empty mask (group indexes end, even empty)
    return kept, end
