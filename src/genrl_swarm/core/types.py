"""Frozen dataclasses that cross component and network boundaries.

They are plain dataclasses (not dicts) so that every layer agrees on one shape, and so the
codec can validate what a peer sent against the same declarations the loop uses.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

#: Version of the wire format. Bump it when a field of Rollout or Envelope changes meaning.
FORMAT_VERSION = 1


def content_id(*parts: Any) -> str:
    """A stable hex id for JSON-able content: the same question hashes the same on every peer."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True)
class Task:
    """One question of a round.

    ``id`` hashes the question (prompt, answer, metadata at creation), so peers that draw the
    same question agree on its id without talking. Later stages show the *same* task with a
    different prompt (``with_prompt``); the id stays, so every stage's rollouts can be scored
    against the original question.
    """

    id: str
    prompt: str
    answer: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(cls, prompt: str, answer: str | None = None, **metadata: Any) -> Task:
        return cls(content_id(prompt, answer, metadata), prompt, answer, dict(metadata))

    def with_prompt(self, prompt: str, **metadata: Any) -> Task:
        """The same question presented differently (a later stage); the id is kept."""
        return replace(self, prompt=prompt, metadata={**self.metadata, **metadata})


@dataclass(frozen=True)
class Rollout:
    """What one peer produced for one task in one stage: several completions of one prompt."""

    peer_id: str
    round: int
    stage: int
    task_id: str
    prompt: str
    completions: tuple[str, ...]
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Also runs when the codec decodes a peer's payload: a ValueError here rejects it.
        if self.round < 0 or self.stage < 0:
            raise ValueError(f"round and stage must be >= 0, got {self.round}/{self.stage}")
        if not self.completions:
            raise ValueError("a rollout needs at least one completion")


@dataclass(frozen=True)
class Envelope:
    """The unit on the wire: one peer's rollouts for one (round, stage)."""

    version: int
    sender: str
    round: int
    stage: int
    body: tuple[Rollout, ...]

    def __post_init__(self) -> None:
        if self.version != FORMAT_VERSION:
            raise ValueError(f"format version {self.version}, this peer speaks {FORMAT_VERSION}")
        if self.round < 0 or self.stage < 0:
            raise ValueError(f"round and stage must be >= 0, got {self.round}/{self.stage}")
        for r in self.body:
            if (r.peer_id, r.round, r.stage) != (self.sender, self.round, self.stage):
                raise ValueError(
                    f"rollout of {r.peer_id} r{r.round}/s{r.stage} inside envelope of "
                    f"{self.sender} r{self.round}/s{self.stage}"
                )


@dataclass(frozen=True)
class ScoredRollout:
    """A rollout with the rewards *this* peer computed for each of its completions."""

    rollout: Rollout
    rewards: tuple[float, ...]

    @property
    def mean(self) -> float:
        return sum(self.rewards) / len(self.rewards)


@dataclass(frozen=True)
class RoundRewards:
    """All locally computed rewards of a round, queryable by peer and stage."""

    scored: tuple[ScoredRollout, ...]
    unscorable: int = 0  # rollouts whose task this peer does not know (another seed, a forgery)

    def select(self, peer: str | None = None, stage: int | None = None) -> list[ScoredRollout]:
        return [
            s
            for s in self.scored
            if (peer is None or s.rollout.peer_id == peer)
            and (stage is None or s.rollout.stage == stage)
        ]

    def mean_by_peer(self, stage: int | None = None) -> dict[str, float]:
        sums: dict[str, list[float]] = {}
        for s in self.select(stage=stage):
            sums.setdefault(s.rollout.peer_id, []).extend(s.rewards)
        return {p: sum(v) / len(v) for p, v in sorted(sums.items())}

    def winners(self, top_k: int = 1) -> tuple[str, ...]:
        """Peers with the highest mean reward (ties broken by id, so every peer agrees)."""
        means = self.mean_by_peer()
        ranked = sorted(means, key=lambda p: (-means[p], p))
        return tuple(ranked[:top_k])


@dataclass(frozen=True)
class RoundResult:
    """What a peer reports after a round: to the coordinator, the logs and the hooks."""

    round: int
    peer_id: str
    rewards: dict[str, float]  # mean reward per peer, computed locally
    winners: tuple[str, ...]
    metrics: dict[str, float] = field(default_factory=dict)
