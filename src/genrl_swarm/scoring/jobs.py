"""What passes between a peer and its scorer sandbox: limits, and the typed reply.

Jobs go out pickled (we write them; the sandbox reads them). Replies come back as one typed
msgpack struct, never pickle: once a stranger's text ran in a sandboxed process, everything that
process says is the stranger's word.
"""

from __future__ import annotations

import enum

import msgspec

from genrl_swarm.core.meter import CutOff


class Confinement(enum.Enum):
    """What holds the scorer sandbox in, as its zygote reports it (one byte on the wire)."""

    JAILED = "j"  # the kernel's sandbox (sandbox.jail): namespaces, filesystem view, no env, no tty
    NETWORK_ONLY = "i"  # unconfined by the operator's choice; a network namespace still
    NONE = "n"  # unconfined, and the kernel gave no namespace at all


class ScorerLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Limits of the scorer sandbox; the ``scorer`` section of a recipe's ``trust``.

    ``cpu_seconds`` caps one call (and a sender's remaining ``trust.cpu_budget`` caps it lower);
    ``wall_seconds`` ends a call that waits for a CPU that long (a loaded machine: not charged),
    set wide because peers run with their cores saturated. ``unconfined``: run third-party
    scorers where the kernel cannot build the sandbox (``sandbox.jail``), with only the seccomp
    filter, rlimits and audit hook around them: the operator's explicit choice, never a default."""

    cpu_seconds: float = 1.0
    wall_seconds: float = 30.0
    memory_mb: int = 512  # address space each worker may add to what the preloaded scorers use
    file_mb: int = 1
    workers: int = 4  # calls running at once, each in a worker of its own
    unconfined: bool = False

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


class ZygoteSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How the peer starts the sandbox's zygote: its limits, the modules it preloads, where they
    are (``python -I`` reads no ``PYTHONPATH``), its scratch directory, and how it is held in."""

    limits: ScorerLimits
    modules: tuple[str, ...]
    import_path: tuple[str, ...]
    scratch: str
    confinement: Confinement
