"""Frozen records that cross component boundaries on one peer.

Two views of a question are kept apart on purpose:
- ``Task`` is this peer's private record: the prompt *and* the ground truth rewards are scored
  against. It never reaches the policy and never crosses the wire.
- ``StageInput`` is what the policy sees in one stage: a prompt and public context, no answer.
  Its ``digest`` is what a received rollout must name to be accepted: peers compare inputs by
  hash, they never read each other's prompts.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generic, TypeVar

from genrl_swarm.core.bodies import Body

#: Version of the wire format. Bump it when a body or the Envelope changes meaning.
FORMAT_VERSION = 3


def content_id(*parts: Any) -> str:
    """A stable hex id for JSON-able content: the same question hashes the same on every peer."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True)
class StageInput:
    """What the policy is shown for one task in one stage: the prompt and public context
    (e.g. the arms on offer, the swarm's answers). Never the ground truth."""

    task_id: str
    stage: int
    prompt: str
    context: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def digest(self) -> str:
        """Hash of everything the policy saw; a rollout is accepted only for the same digest.
        Cached: every received body is compared with it (the context is never changed after)."""
        return content_id(self.task_id, self.stage, self.prompt, self.context)


@dataclass(frozen=True)
class Task:
    """One question of a round, private to this peer.

    ``id`` hashes the question (prompt, answer, metadata), so peers that draw the same question
    agree on its id without talking. ``answer`` and ``metadata`` are for scoring only; ``public``
    is the part of the metadata the policy may see. Tasks without a single answer leave
    ``answer`` None and score from ``metadata`` (a verifier's inputs, a test suite, a seed).
    """

    id: str
    prompt: str
    answer: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    public: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(cls, prompt: str, answer: str | None = None, public: dict[str, Any] | None = None, **metadata: Any) -> Task:
        public = dict(public or {})
        return cls(content_id(prompt, answer, metadata, public), prompt, answer, dict(metadata), public)

    def input(self, stage: int = 0, prompt: str | None = None, **context: Any) -> StageInput:
        """The policy's view of this task in ``stage``: its public part, optionally a new prompt
        (later stages) and more context built by this peer."""
        return StageInput(self.id, stage, self.prompt if prompt is None else prompt, {**self.public, **context})


BodyT = TypeVar("BodyT", bound=Body)


@dataclass(frozen=True)
class Rollout(Generic[BodyT]):
    """A body this peer accepted, with where it came from and the text this peer derived from it
    (one per sample, for display and scoring; empty for bodies that are not text). ``input`` is
    the input the sender answered when it is not this peer's own: a later-stage input this peer
    rebuilt from the earlier payloads the sender named (see ``Ref``)."""

    peer_id: str
    round: int
    stage: int
    body: BodyT
    texts: tuple[str, ...] = ()
    input: StageInput | None = None

    @property
    def task_id(self) -> str:
        return self.body.task_id


@dataclass(frozen=True, order=True)
class Ref:
    """One earlier-stage payload of this round, named by its sender's signed commitment: what a
    later-stage input is built from. Two peers that built from the same refs built the same input;
    a receiver holding the named payloads rebuilds a sender's input from them."""

    stage: int
    sender: str
    digest: str  # sha256 of the payload, hex


class DropKind(enum.StrEnum):
    """Why a body was refused, which decides what it costs its sender (``SenderBook``)."""

    PAYLOAD = "payload"  # unreadable, forged, not as committed, an invalid signed reference
    EQUIVOCATION = "equivocation"  # two signed commitments for one (round, stage): the proof
    FORGED = "forged"  # a spot check: its committed model does not draw a body it signed (the proof)
    BUDGET = "budget"  # over a per-sender limit
    CPU = "cpu"  # over this peer's CPU budget for the sender: this peer's load decides it, so never held against it
    REFUSED = "refused"  # the policy or the round's own checks, on an input every honest peer builds alike
    SCORING = "scoring"  # game code failed on it
    COPY = "copy"  # another sender committed it first: de-duplicated, never held against anyone
    LATE = "late"  # no commitment, or no reveal, in time: timing is a difference of view
    VIEW = "view"  # answers an input built from payloads this peer does not hold as the sender named them
    FOREIGN = "foreign"  # a task this peer does not play: honest peers' tasks can differ (per-peer mixes, curriculum levels)
    LOCAL = "local"  # refused by this peer's own settings (its tokenizer, max_new_tokens, ...): honest peers' settings differ
    FRESH = "fresh"  # an id without history past the newcomers this peer reads a round (core.newcomers): not read

    @property
    def hard(self) -> bool:
        """Quarantines at once: provable against the sender, and no honest peer produces it."""
        return self in _HARD

    @property
    def counted(self) -> bool:
        """Counts toward ``max_soft_drops``: checks every honest peer reproduces alike."""
        return self in (DropKind.REFUSED, DropKind.SCORING)


# Not CPU: what checking a body costs depends on the checking machine and its load (a loaded
# receiver charged 0.3 ms sandbox calls up to 3 s), which no other peer reproduces. The budget
# still caps what a sender costs each round; it is not a proof against it.
_HARD = frozenset({DropKind.PAYLOAD, DropKind.EQUIVOCATION, DropKind.FORGED, DropKind.BUDGET})


@dataclass(frozen=True)
class Refusal:
    """A ``Policy.check`` verdict that says what decided it. ``local``: this peer's own settings
    (its model's tokenizer and vocabulary, its ``max_new_tokens``, its ``num_generations``), which
    honest peers need not share, so the body is dropped (``DropKind.LOCAL``) and never held against
    its sender. Otherwise (or a plain string) it is a check every honest peer reproduces alike
    (``DropKind.REFUSED``, counted toward quarantine)."""

    reason: str
    local: bool = False

    @property
    def kind(self) -> DropKind:
        return DropKind.LOCAL if self.local else DropKind.REFUSED


@dataclass(frozen=True)
class Drop:
    """A body this peer refused, and why (counted per sender as its ``kind`` says)."""

    peer_id: str
    stage: int
    task_id: str | None
    reason: str
    kind: DropKind = DropKind.REFUSED

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", DropKind(self.kind))  # a kind's name in tests and old callers


@dataclass(frozen=True)
class Verified:
    """A body this peer's spot check redid with the model its sender committed to and found drawn
    by it (``core.spot_checks``): every redone token that is not a near tie is the public draw's
    pick, and its claimed log-prob is the recomputed one within the check's tolerance
    (``lm.verify.Tolerance``). Near ties (about a tenth of SmolLM2's tokens at temperature 1) are
    not decided either way.

    Why a mark and nothing more: a body not checked is bounded, not checked; this one is its
    sender's model's work. No LM learner reads a swarm body's claimed log-probs (GRPO and the agents'
    learner weigh a swarm token by this peer's own policy, ``lm.grpo_loss.behaviour_of``), so
    there is no claim for a verified log-prob to replace. ``index``: the body's place in the
    sender's payload (as a ``Fault`` names it); ``samples``: the samples redone (None: all);
    ``body``: the object admission stored (``GameState.is_verified`` compares by identity)."""

    peer_id: str
    stage: int
    index: int
    samples: tuple[int, ...] | None = None
    body: Body | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ScoredRollout:
    """A rollout with the rewards *this* peer computed for each of its samples."""

    rollout: Rollout[Any]
    rewards: tuple[float, ...]

    @property
    def mean(self) -> float:
        return sum(self.rewards) / len(self.rewards)


def tie_break(round: int, peer: str) -> str:
    """Per-round order among peers with equal reward: a hash every peer computes the same way,
    so no peer id wins every tie."""
    return hashlib.sha256(f"{round}:{peer}".encode()).hexdigest()


@dataclass(frozen=True)
class RoundRewards:
    """All locally computed rewards of a round, queryable by peer and stage."""

    round: int
    scored: tuple[ScoredRollout, ...]

    def select(self, peer: str | None = None, stage: int | None = None) -> list[ScoredRollout]:
        return [s for s in self.scored if (peer is None or s.rollout.peer_id == peer) and (stage is None or s.rollout.stage == stage)]

    def mean_by_peer(self, stage: int | None = None) -> dict[str, float]:
        sums: dict[str, list[float]] = {}
        for s in self.select(stage=stage):
            sums.setdefault(s.rollout.peer_id, []).extend(s.rewards)
        return {p: sum(v) / len(v) for p, v in sorted(sums.items())}

    def mean_by_stage(self) -> dict[int, dict[str, float]]:
        """``mean_by_peer`` of each stage that has a scored rollout: a multi-stage game's round
        mean hides a stage that learns nothing (a critique, a revision) behind one that does."""
        return {stage: self.mean_by_peer(stage) for stage in sorted({s.rollout.stage for s in self.scored})}

    def winners(self, top_k: int = 1) -> tuple[str, ...]:
        """Peers with the highest mean reward; ties broken by ``tie_break`` (the same on every peer)."""
        means = self.mean_by_peer()
        ranked = sorted(means, key=lambda p: (-means[p], tie_break(self.round, p)))
        return tuple(ranked[:top_k])


@dataclass(frozen=True)
class RoundResult:
    """What a peer reports after a round: to the coordinator, the logs and the hooks."""

    round: int
    peer_id: str
    rewards: dict[str, float]  # mean reward per peer, computed locally
    winners: tuple[str, ...]
    metrics: dict[str, float] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)  # sender -> bodies refused this round
    stage_rewards: dict[int, dict[str, float]] = field(default_factory=dict)  # stage -> mean reward per peer there (RoundRewards.mean_by_stage)
