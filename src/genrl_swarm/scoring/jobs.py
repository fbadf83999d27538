"""What passes between a peer and its scorer sandbox: limits, and the typed reply.

Jobs go out pickled (we write them; the sandbox reads them). Replies come back as one typed
msgpack struct, never pickle: once a stranger's text ran in a sandboxed process, everything that
process says is the stranger's word.
"""

from __future__ import annotations

import msgspec

from genrl_swarm.core.meter import CutOff

#: CPU seconds a worker may use over its whole life (kernel-enforced backstop); the peer retires
#: a worker at half of it, so an honest sender's job never meets it.
WORKER_CPU_SECONDS = 600.0


class ScorerLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Limits of the scorer sandbox; the ``scorer`` section of a recipe's ``trust``.

    ``cpu_seconds`` caps one call (and a sender's remaining ``trust.cpu_budget`` caps it lower);
    ``wall_seconds`` ends a call that blocks without using CPU, set wide because peers run with
    their cores saturated and waiting is not the sender's doing."""

    cpu_seconds: float = 1.0
    wall_seconds: float = 30.0
    memory_mb: int = 512  # address space each worker may add to what the preloaded scorers use
    file_mb: int = 1
    workers: int = 4  # live sandboxed workers; each serves one sender at a time

    def __post_init__(self) -> None:
        if not (0 < self.cpu_seconds <= self.wall_seconds and self.memory_mb > 0 and self.workers >= 1):
            raise ValueError(f"scorer limits need 0 < cpu_seconds <= wall_seconds, memory_mb > 0, workers >= 1; got {self}")


class ScoreReply(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A sandboxed scorer's answer: ``value`` when ``error`` (what the scorer did: "raised ...",
    "tried what the sandbox forbids ...") is empty."""

    value: float = 0.0
    error: str = ""
    nonce: int = 0  # the job's: a reply a worker queued ahead of its job cannot carry it


class ScorerFailed(CutOff):
    """A sandboxed scorer did not give a score: it raised, crashed, overran its CPU or wall
    clock or memory. The body it was scoring is dropped as ``scoring`` (its sender is charged
    the CPU it took)."""
