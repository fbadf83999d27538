"""What work done for one sender costs, wherever it runs.

``trust.score_under_budget`` charges a sender the CPU its bodies take on the scoring thread. Work done for the
same body in other processes (a sandboxed scorer, an environment service replaying an episode)
is not on that thread's clock, so whoever does it reports it here: the code running on the
sender's behalf opens a ``Meter`` with what is left of the sender's budget, and the sandbox or
service client reads ``remaining()`` to cut the work off in time and ``charge()``s what it took.
A thread-local, so that peers sharing a process (the in-memory swarm) never charge each other.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class CutOff(Exception):
    """Work for a sender was stopped at a limit (its budget, a sandbox's CPU or wall clock) or
    failed in a sandbox: the body is dropped, and on this peer's own bodies too (not a bug here)."""


class Unavailable(Exception):
    """Work for a sender could not be done for a reason of this peer's own (its sandbox would not
    start): the body is dropped as ``local``, never held against the sender."""


@dataclass
class Meter:
    """``budget`` seconds this sender may still cost; ``spent`` seconds charged so far from
    outside the scoring thread."""

    sender: str
    budget: float
    spent: float = 0.0

    @property
    def remaining(self) -> float:
        return max(0.0, self.budget - self.spent)


_local = threading.local()


@contextmanager
def metered(sender: str, budget: float = math.inf) -> Iterator[Meter]:
    """Charge work done in this block, on this thread, to ``sender``."""
    outer = getattr(_local, "meter", None)
    _local.meter = meter = Meter(sender, budget)
    try:
        yield meter
    finally:
        _local.meter = outer


def current() -> Meter | None:
    """The meter open on this thread (None outside ``score_under_budget``: own evaluation, tests)."""
    return getattr(_local, "meter", None)


def charge(seconds: float) -> None:
    meter = current()
    if meter is not None:
        meter.spent += max(0.0, seconds)


def remaining() -> float:
    """Seconds the current sender may still cost (infinite without a meter)."""
    meter = current()
    return math.inf if meter is None else meter.remaining


def sender() -> str:
    """Whose work this is ("" without a meter): sandboxes keep different senders apart."""
    meter = current()
    return "" if meter is None else meter.sender
