"""The envd wire: gRPC method names, request/response structs, and controller<->worker frames.

No generated protobuf code: each gRPC method carries one msgpack-encoded msgspec struct, decoded
with the struct's bounds checked (and under the server's message-size cap) before anything
acts on it. The same request structs travel from the controller to its workers, wrapped in a
``Frame`` with a request id so one worker answers many requests concurrently.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from genrl_swarm.envd.errors import Failure
from genrl_swarm.envd.types import Action, Reset, SessionId, StepResult, TaskSpec

SERVICE = "genrl.envd.Env"
HELLO = b"ready"  # a worker's first frame, once its sandbox children are up
MAX_REQUEST_BYTES = 128 << 10
MAX_RESPONSE_BYTES = 1 << 20

#: Error kind (envd.errors) -> gRPC status code name, and back.
STATUS = {
    "invalid": "INVALID_ARGUMENT",
    "not_found": "NOT_FOUND",
    "lost": "ABORTED",
    "overloaded": "RESOURCE_EXHAUSTED",
    "unavailable": "UNAVAILABLE",
    "internal": "INTERNAL",
}


class StepRequest(msgspec.Struct, frozen=True, tag="step", forbid_unknown_fields=True):
    """One action of a session; ``tokens``: the episode's tokens so far, as the policy counts them."""

    session: SessionId
    action: Action
    tokens: Annotated[int, msgspec.Meta(ge=0, le=1 << 30)] = 0


class CloseRequest(msgspec.Struct, frozen=True, tag="close", forbid_unknown_fields=True):
    session: SessionId


class StatsRequest(msgspec.Struct, frozen=True, tag="stats", forbid_unknown_fields=True):
    pass


class Closed(msgspec.Struct, frozen=True):
    closed: bool  # False: there was no such session (closing twice is not an error)


class WorkerStats(msgspec.Struct, frozen=True):
    pid: int
    sessions: int
    steps: int
    sandbox_deaths: int
    isolation: str  # "no network" (own network namespace) or "networked"
    rss_bytes: int  # the worker and its sandbox children


class Stats(msgspec.Struct, frozen=True):
    sessions: int
    max_sessions: int
    workers: tuple[WorkerStats, ...]
    restarts: int  # workers restarted after dying
    lost: int  # sessions lost with a dead worker
    evicted: int  # sessions closed after their TTL
    rss_bytes: int  # the controller process


#: gRPC method -> (request type, response type).
METHODS: dict[str, tuple[type, type]] = {
    "Reset": (TaskSpec, Reset),
    "Step": (StepRequest, StepResult),
    "Close": (CloseRequest, Closed),
    "Stats": (StatsRequest, Stats),
}


# --------------------------------------------------------------------------- controller <-> worker
class WorkerReset(msgspec.Struct, frozen=True, tag="reset"):
    session: SessionId
    spec: TaskSpec


WorkerJob = WorkerReset | StepRequest | CloseRequest | StatsRequest


class Frame(msgspec.Struct, frozen=True):
    id: int
    job: WorkerJob


class WorkerReply(msgspec.Struct, frozen=True, omit_defaults=True):
    """Exactly one of the fields is set."""

    id: int
    reset: Reset | None = None
    step: StepResult | None = None
    closed: Closed | None = None
    stats: WorkerStats | None = None
    failure: Failure | None = None


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` (0 when it is gone), from /proc."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * 4096
    except (OSError, IndexError, ValueError):
        return 0
