"""Who answers which questions in a round: one rule for every data manager that offers both."""

from __future__ import annotations

import enum


class Questions(enum.Enum):
    SHARED = "shared"  # every peer the same: a function of (swarm seed, round)
    PER_PEER = "per_peer"  # each peer its own: (swarm seed, round, peer id), as in SAPO

    @classmethod
    def parse(cls, value: str | Questions) -> Questions:
        """The recipe's string as a member; ValueError naming the choices."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"questions: {value!r} is not one of {', '.join(q.value for q in cls)}") from None
