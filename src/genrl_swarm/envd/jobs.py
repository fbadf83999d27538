"""Messages between an environment worker and its sandboxed children: jobs in, replies out."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from genrl_swarm.envd.tasks.base import Outcome, Setup

#: A child's exit code after a MemoryError: it leaves unanswered (its heap may be damaged).
EXIT_MEMORY = 3


class SandboxLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Resource limits of one sandboxed child (the worker enforces ``wall_seconds`` from outside:
    a tool that blocks without using CPU is killed by the clock)."""

    memory_mb: int = 512  # RLIMIT_AS of the child (address space, so it includes the interpreter)
    cpu_seconds: float = 2.0  # CPU time per job (RLIMIT_CPU, moved before each job)
    wall_seconds: float = 5.0  # wall time per job
    file_mb: int = 64  # RLIMIT_FSIZE: largest file a tool can write


class SetupJob(msgspec.Struct, frozen=True, tag="setup"):
    task: str
    seed: int
    scratch: str | None


class CallJob(msgspec.Struct, frozen=True, tag="call"):
    task: str
    tool: str
    arguments: dict[str, Any]
    state: Any
    scratch: str | None


Job = SetupJob | CallJob


class Reply(msgspec.Struct, frozen=True):
    """``ok``: the job's result; ``tool_failed``: a mistake the model can fix (the episode goes on);
    ``crashed``: the tool code raised or broke a sandbox rule (the session ends)."""

    kind: Literal["ok", "tool_failed", "crashed"]
    message: str = ""
    setup: Setup | None = None
    outcome: Outcome | None = None


class SandboxDied(Exception):
    """The child running a job died or was killed (CPU, memory, wall clock, crash); its session
    ends, the worker starts a new child."""

    cpu_seconds: float = 0.0
