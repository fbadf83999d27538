"""Errors of the environment service: infrastructure failures, never the model's mistakes.

A model's malformed call or bad argument is a message it sees (``StepResult``); these exceptions
are for the caller's code: a session that no longer exists, a full server, an unreachable one.
Each message says what happened and what to do next.
"""

from __future__ import annotations

from typing import Literal

import msgspec

Kind = Literal["invalid", "not_found", "lost", "overloaded", "unavailable", "internal"]


class EnvError(Exception):
    """Base of every environment-service error."""

    kind: Kind = "internal"


class InvalidRequest(EnvError):
    """The request itself is wrong (unknown task, malformed bytes): fix the caller."""

    kind = "invalid"


class SessionNotFound(EnvError):
    """No such session: never created, closed, finished, or evicted after its TTL."""

    kind = "not_found"


class SessionLost(EnvError):
    """The session's worker process died; the server restarted it. Start a new session."""

    kind = "lost"


class Overloaded(EnvError):
    """The server holds its maximum number of sessions; close some or retry later."""

    kind = "overloaded"


class EnvUnavailable(EnvError):
    """The server could not be reached or did not answer within the deadline."""

    kind = "unavailable"


class CannotServe(EnvError):
    """``genrl-swarm envd`` cannot listen where it was told to (a port in use, an address that is
    not this machine's); the command prints it in one line (exit 3)."""

    kind = "unavailable"


ERRORS: dict[str, type[EnvError]] = {c.kind: c for c in (EnvError, InvalidRequest, SessionNotFound, SessionLost, Overloaded, EnvUnavailable)}


class Failure(msgspec.Struct, frozen=True, tag="failure"):
    """An ``EnvError`` as data, to cross a process boundary."""

    kind: Kind
    message: str

    @classmethod
    def of(cls, error: EnvError) -> Failure:
        return cls(error.kind, str(error))

    def exception(self) -> EnvError:
        return ERRORS[self.kind](self.message)
