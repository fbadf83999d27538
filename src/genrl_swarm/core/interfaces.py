"""The interfaces a game is assembled from.

A game implements DataManager and RewardManager and brings a Policy (acts) and a Learner
(updates the policy); it picks a Communication backend and a Coordinator from the library.
The split between Policy and Learner is what lets the same game run synchronously in one
process, or with rollout workers and a learner apart (Ray), or with a JAX policy.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from genrl_swarm.core.bodies import Body
from genrl_swarm.core.state import GameState
from genrl_swarm.core.trust import score_under_budget
from genrl_swarm.core.types import Ref, Refusal, Rollout, RoundResult, RoundRewards, StageInput, Task


class RunInterrupted(Exception):
    """Raised inside a peer's loop when the run was asked to stop (Ctrl-C)."""


class DataManager(ABC):
    """Makes each round's tasks and each stage's inputs.

    ``round_tasks`` must be a pure function of (swarm seed, round) so that peers sharing a
    seed draw the same questions without talking. A game where each peer gets its own questions
    (SAPO) sets ``per_peer`` and overrides ``tasks_for``: a pure function of (swarm seed, round,
    peer id), so that a receiver rebuilds a sender's tasks, truth included, and scores its bodies
    itself. Per-peer questions are for single-stage games (later stages are built from the
    answers to *this* peer's questions).
    """

    #: Whether each peer plays its own questions (``tasks_for``) rather than the shared ones.
    per_peer: bool = False
    #: Whether honest peers' shared tasks of a round can differ (per-peer task mixes, curriculum
    #: levels): a body for a task this peer does not play is then a difference of view, not
    #: evidence against its sender (``DropKind.FOREIGN``).
    tasks_differ: bool = False

    @abstractmethod
    def round_tasks(self, round: int) -> list[Task]: ...

    def tasks_for(self, round: int, peer_id: str) -> list[Task]:
        """The tasks ``peer_id`` plays in ``round``: the shared ``round_tasks`` unless ``per_peer``."""
        return self.round_tasks(round)

    def stage_inputs(self, state: GameState, stage: int) -> list[StageInput]:
        """Inputs for ``stage``, built from this peer's state only. Stage 0 shows each task;
        multi-stage games override this to build later inputs from the rollouts (own and the
        swarm's) accepted into ``state`` — from their derived text, never a sender's prompt."""
        if stage == 0:
            return [t.input(0) for t in state.tasks.values()]
        raise NotImplementedError(f"{type(self).__name__} has no stage {stage}: override stage_inputs")

    def eval_tasks(self) -> list[Task]:
        """A held-out split for evaluation; empty when the game has none."""
        return []

    def attach(self, manager: Any) -> None:
        """Called once by the ``core.game.GameManager`` this data manager serves (typed ``Any``:
        ``core.game`` imports this module), to add hooks to its loop (a curriculum reads each
        round's rewards); none by default."""

    def state(self) -> dict[str, Any]:
        """What this data manager learned while playing (a curriculum's level), JSON-able: saved
        with each checkpoint and given to ``restore`` on resume. Empty when its tasks are a pure
        function of the round."""
        return {}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take back what ``state`` returned (an empty mapping: a checkpoint without it)."""


class RewardManager(ABC):
    """Rewards, always computed locally from this peer's task and the input it built."""

    @abstractmethod
    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        """One reward per sample of ``rollout``, which answered ``input`` (this peer's own)."""

    def score_state(self, state: GameState, stage: int | None = None, cpu_budget: float = math.inf) -> RoundRewards:
        """Score every accepted rollout (own and swarm) of ``stage`` (all stages if None), each
        sender under its CPU budget: ``core.trust.score_under_budget`` (a body whose scoring
        raises drops it for the round and counts against its sender, never the peer)."""
        return score_under_budget(state, self.score, stage, cpu_budget)


@dataclass(frozen=True)
class Weights:
    """A policy's parameters at ``version``. ``state`` is whatever the policy's ``load_weights``
    takes: a state dict, a pytree, or the shared module itself when both live in one process."""

    version: int
    state: Any


@dataclass(frozen=True)
class ActSeed:
    """Where one round's acts of one sender draw their randomness from, public to every peer:
    the swarm's epoch (``comm.epoch``: the run), the round and the sender. A policy that samples
    derives each sample's random numbers from it, the input's digest and the sample's index
    (``paradigms.lm.seeding``), so a receiver can redo a sender's draw instead of believing it."""

    epoch: bytes
    round: int
    sender: str


#: The most bytes a committed model may be: what a checker fetches, hashes and holds per sender
#: (an adapter, never a base; LoRA r=64 on every projection of a 0.5B model is ~70 MB in fp32).
#: One limit for the sender (it commits nothing bigger) and every receiver (it fetches nothing bigger).
MAX_MODEL_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class ModelClaim:
    """The model a sender's signed commitment names (issue 45.3): ``name``, the paradigm's own
    (LM adapter peers: the shared base's and the adapter's digests and the sampling settings), and
    the hex sha256 and size of the bytes a checker fetches to rebuild it (``Policy.check_work``)."""

    name: str
    blob: str
    size: int


@dataclass(frozen=True)
class WorkCheck:
    """What a spot check of bodies found (``Policy.check_work``): per body, why the committed model
    does not draw it (a mismatch, which no honest sender produces) or None; tokens redone and
    near ties skipped (rounding could decide them)."""

    mismatches: tuple[str | None, ...]
    tokens: int = 0
    near_ties: int = 0


@dataclass(frozen=True)
class Fault:
    """A failed spot check as it travels (``Envelope.faults``): the accused's signed commitment for
    (``round``, ``stage``), which names its payload and ``claim``, and the index of the body that
    model does not draw. Anyone re-checks it from the payload and the model's bytes, fetched by
    their committed digests (``Communication.faulted_work``), before acting on it."""

    accuser: str
    accused: str
    round: int
    stage: int
    body: int
    claim: ModelClaim
    epoch: bytes
    payload: str  # the hex sha256 of the accused's payload, as its commitment names it
    size: int  # ... and its size

    @property
    def seed(self) -> ActSeed:
        """The public numbers the accused drew that round's bodies with (``ActSeed``)."""
        return ActSeed(self.epoch, self.round, self.accused)


class Policy(ABC):
    """Acts: turns stage inputs into bodies of the game's body type."""

    #: The body type this policy produces and accepts from peers (the codec decodes into it): a
    #: class default, or set per instance where one class plays two (marl's parameter sharing).
    body_type: type[Body] = Body
    version: int = 0

    @abstractmethod
    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        """One body per input, in order (``greedy``: the deterministic choice, for evaluation)."""

    def begin_round(self, seed: ActSeed) -> None:
        """Called by the game before this round's first act: what the round's draws are seeded
        with. A policy without randomness, or one that keeps its own stream, ignores it."""

    def check(self, body: Body, input: StageInput) -> str | Refusal | None:
        """Why a peer's body cannot be used by this policy (another tokenizer, an out-of-range
        action, a budget), or None. Runs before the body is stored, scored or trained on. A plain
        string counts against the sender (every honest peer must say the same); a
        ``Refusal(reason, local=True)`` is this peer's own setting speaking (a tokenizer, a length
        limit) and is never held against anyone."""
        return None

    def texts(self, body: Body) -> tuple[str, ...]:
        """Text of each sample, derived by this peer (decoded with its own tokenizer); () for
        bodies that are not text."""
        return ()

    def committed_model(self) -> tuple[str, bytes] | None:
        """The model this policy acts with, for the commitment of what it just produced: a name
        and the bytes another peer rebuilds it from (``check_work``). None (the default): nothing
        a receiver can redo, so its bodies are never spot-checked (they keep the usual bounds)."""
        return None

    def check_work(
        self, seed: ActSeed, bodies: Sequence[Body], model: str, blob: bytes, samples: Sequence[Sequence[int]] | None = None
    ) -> WorkCheck | str:
        """Spot check (issue 45.4): whether the model ``model`` names, rebuilt from ``blob`` (which
        hashes to what the sender committed), draws ``bodies`` with the public numbers of ``seed``
        (``samples``: per body, the indices of the samples to redo; None: all).
        A string: why this peer cannot check them (another base, no such support), which is this
        peer's difference and never held against the sender."""
        return "this policy does not check bodies"

    @abstractmethod
    def load_weights(self, weights: Weights) -> None:
        """Act with ``weights`` from now on (and report ``weights.version`` in bodies)."""

    def interrupt(self) -> None:
        """Asked from another thread to make a running ``act`` stop soon (it may raise RunInterrupted)."""

    @abstractmethod
    def save(self, directory: Path) -> None:
        """Weights and sampling RNG into ``directory``."""

    @abstractmethod
    def load(self, directory: Path) -> None: ...


class Learner(ABC):
    """Updates the policy's weights from scored rollouts."""

    @abstractmethod
    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        """One update from ``rewards`` (the stage(s) just played); returns metrics to log."""

    @abstractmethod
    def weights(self) -> Weights:
        """The current weights and version, for the policy to load."""

    @abstractmethod
    def save(self, directory: Path) -> None:
        """Optimizer state, step counters and RNG into ``directory``."""

    @abstractmethod
    def load(self, directory: Path) -> None: ...

    def acting_policy(self, policy: Policy) -> Policy:
        """The policy the game acts with, given the one this learner trains. A learner that
        samples elsewhere (async_grpo's rollout workers) hands back one that acts there."""
        return policy


@dataclass(frozen=True)
class ExchangeResult:
    """Outcome of one exchange: who answered, who was dropped and why.

    ``late``: the dropped senders that sent no commitment, or revealed nothing, in time (a
    difference of view, never held against them); the other drops are provable. ``digests``:
    the payload each received sender committed to (hex sha256), what a later stage's ``Ref``
    names; ``bases``: the earlier payloads each sender says its inputs were built from, their
    signed commitments verified; ``equivocators``: senders proven to have signed two
    commitments for one (round, stage), with the proof described. ``costs``: seconds of this
    thread's CPU the transport spent reading each received sender's payload (decoding it,
    checking the signed records it passes on), charged to that sender's budget like checking
    its bodies; ``vouched``: senders the transport itself vouches for (members of a swarm it
    closes to strangers: the peers of one process, the ranks of one job), never newcomers."""

    received: dict[str, tuple[Body, ...]]  # peer id -> bodies, own included, in commitment order
    dropped: dict[str, str] = field(default_factory=dict)  # sender -> reason
    expected: int | None = None  # peers the backend waited for, when it knows
    sizes: dict[str, int] = field(default_factory=dict)  # sender -> payload bytes it committed to
    accounts: dict[str, str] = field(default_factory=dict)  # sender -> chain account it signed
    late: frozenset[str] = frozenset()
    digests: dict[str, str] = field(default_factory=dict)
    bases: dict[str, tuple[Ref, ...]] = field(default_factory=dict)
    equivocators: dict[str, str] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)
    vouched: frozenset[str] = frozenset()
    #: sender -> the model its signed commitment names (``Policy.committed_model``), if any.
    models: dict[str, ModelClaim] = field(default_factory=dict)
    #: failed spot checks received senders passed on, their signed commitments verified.
    faults: tuple[Fault, ...] = ()

    def summary(self) -> str:
        want = "?" if self.expected is None else str(self.expected)
        bad = f", dropped {len(self.dropped)}" if self.dropped else ""
        return f"got {len(self.received)} of {want}{bad}"


@dataclass(frozen=True)
class FetchedPayload:
    """An earlier payload fetched by its signed digest: its bodies and the payloads it names."""

    bodies: tuple[Body, ...]
    basis: tuple[Ref, ...] = ()


@dataclass(frozen=True)
class Fetched:
    """What ``Communication.fetch`` got: the payloads by the ``Ref`` that names them, why the
    others were not had, the CPU seconds each naming sender cost (checking the signed commitment,
    reading the payload), charged to its budget like its own payload, and the senders proven to
    have equivocated by what was read (as ``ExchangeResult.equivocators``)."""

    payloads: dict[Ref, FetchedPayload] = field(default_factory=dict)
    failed: dict[Ref, str] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)
    equivocators: dict[str, str] = field(default_factory=dict)


class Communication(ABC):
    """Exchanges this peer's bodies with the swarm for one (round, stage), under a deadline."""

    @property
    @abstractmethod
    def peer_id(self) -> str: ...

    @abstractmethod
    def exchange(
        self,
        round: int,
        stage: int,
        bodies: Sequence[Body],
        timeout: float,
        body_type: type[Body] = Body,
        ignore: Collection[str] = frozenset(),
        basis: Sequence[Ref] = (),
    ) -> ExchangeResult:
        """Send ``bodies``; return what the swarm sent for the same (round, stage), decoded as
        ``body_type``. Returns by ``timeout`` seconds with whatever arrived; never raises on a
        peer's bad or missing payload. Senders in ``ignore`` (quarantined) are not read.
        ``basis``: the earlier payloads of this round this stage's inputs were built from (sent
        with their signed commitments, so receivers can rebuild the inputs)."""

    def settled_epoch(self) -> bytes:
        """The epoch this peer signs in (``comm.epoch``), fixed now if it was not yet: the game
        asks before the first act, whose draws are seeded with it. b"" where there is none."""
        return b""

    def fetch(self, round: int, wanted: Mapping[Ref, str], body_type: type[Body], timeout: float) -> Fetched:
        """The earlier payloads of ``round`` that ``wanted`` names (each with the sender whose
        basis named it: it is asked first, and it pays), by their signed digest, from this
        peer's own store or any peer holding them, within ``timeout`` (``core.views``). A
        transport on which every peer receives the same payloads (one all-gather) has nothing
        to fetch: by default nothing is had."""
        return Fetched(failed=dict.fromkeys(wanted, "this transport does not fetch payloads"))

    def commit_model(self, model: tuple[str, bytes] | None) -> None:
        """Name ``model`` (``Policy.committed_model``: a name and its bytes) in this peer's next
        commitments, and serve its bytes by their digest once revealed. A transport without
        spot checks ignores it."""

    def fetch_model(self, round: int, sender: str, claim: ModelClaim, timeout: float) -> bytes | None:
        """The bytes ``claim`` names (their sha256 and size checked), from this peer's store, the
        sender or any peer holding them, within ``timeout``; None when nobody served them."""
        return None

    def accuse(self, round: int, stage: int, sender: str, body: int, blob: bytes) -> None:
        """Pass on, in this peer's next payloads, that body ``body`` of ``sender``'s payload for
        (``round``, ``stage``) is not what its committed model draws, and serve the model's bytes
        ``blob`` to whoever re-checks it."""

    def faulted_work(self, fault: Fault, body_type: type[Body], timeout: float) -> tuple[Body, bytes] | str:
        """The body ``fault`` names and its committed model's bytes, each checked against the
        accused's signed commitment, from this peer's store or any holder; why not, as a string."""
        return "this transport does not fetch payloads"

    def claim_account(self, account: str) -> None:
        """Sign ``account`` (this peer's chain account) into what this peer publishes, so peers
        can credit it on chain without trusting anyone else's word for it."""

    def swarm_round(self) -> int:
        """The highest round the swarm is known to play (0 if the backend cannot tell)."""
        return 0

    def interrupt(self) -> None:
        """Asked from another thread to end a waiting exchange now (Ctrl-C)."""

    def close(self) -> None:
        """Release sockets, daemons and process groups."""


class Coordinator(ABC):
    """The referee: who is in, which round it is, who earned what."""

    #: One instance serves every peer of a process (in-process referee); False: one per peer
    #: (e.g. one chain account each).
    shared_per_process: ClassVar[bool] = True
    #: The chain address this coordinator reports from ("" when it keeps books locally).
    account: str = ""

    def learn_accounts(self, accounts: Mapping[str, str]) -> None:
        """Peer id -> chain account, from peers' signed commitments: whom to credit on chain."""

    @abstractmethod
    def register(self, peer_id: str) -> None: ...

    @abstractmethod
    def current_round(self) -> int:
        """The swarm's round; a peer that is behind jumps to it."""

    @abstractmethod
    def report(self, result: RoundResult) -> None:
        """Submit this peer's locally computed scores of the *other* peers for a round. A peer's
        reward for the round is the median of what the others scored it; its own claim counts
        only in a swarm of one, and winners follow the medians."""

    def finish_round(self, round: int) -> None:
        """Called when this peer finished ``round``; coordinators with the role advance it."""

    def leave(self, peer_id: str) -> None:
        """``peer_id`` stopped playing (its last round, Ctrl-C, SIGTERM, an error): a coordinator
        that waits for peers' reports stops waiting for its."""

    def standings(self) -> Mapping[str, float]:
        """Cumulative reward per peer, where the coordinator keeps it."""
        return {}

    def tally(self, peer_id: str) -> tuple[float, int]:
        """This peer's cumulative reward and wins, as checkpoints save them."""
        return float(self.standings().get(peer_id, 0.0)), 0

    def restore(self, peer_id: str, cumulative_reward: float, wins: int) -> None:
        """After ``--resume``: continue this peer's books from a checkpoint (coordinators that
        keep them elsewhere, e.g. on chain, ignore this)."""
