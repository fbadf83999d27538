"""Per-sender budgets and quarantine: what one stranger may cost this peer in a round.

Every peer's payload is checked, but checks cost time; a sender that sends too much, or keeps
sending what fails them, is quarantined: its payloads are not read at all for a few rounds.
One rule per ``DropKind`` (``kind.hard``, ``kind.counted``): what is provable against the sender
(forged or unreadable payloads, invalid signed references, equivocation, budget overruns)
quarantines at once; checks every honest peer reproduces alike (refused bodies, game code failing
on them) only when they pile up; differences of view never count: lateness (timing, load), copies
(converged honest peers produce them), and later-stage inputs built from payloads this peer does
not hold. Lateness is remembered (``late``) so exchanges ask late senders last and stop waiting
for them (``comm.base``), which bounds what a staller costs without framing a slow honest peer.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from genrl_swarm.core.bodies import Body
from genrl_swarm.core.meter import CutOff, Unavailable, metered
from genrl_swarm.core.state import GameState
from genrl_swarm.core.types import Drop, DropKind, Rollout, RoundRewards, ScoredRollout, StageInput, Task

log = logging.getLogger(__name__)
#: Rounds a sender's lateness (no commitment, or no reveal, in time) is remembered: it is asked
#: last and not waited for meanwhile. Lateness never quarantines: load and clocks differ by peer.
LATE_WINDOW = 4
#: A sender neither quarantined nor dropped for this many rounds is forgotten (its per-sender
#: entries pruned; the totals by kind stay): fresh ids cost this peer bounded memory.
MEMORY_ROUNDS = 32


def waited_for_again(late: int) -> int:
    """The round a member that missed a full wait in round ``late`` is worth the full wait again:
    the next probe round, every ``LATE_WINDOW`` + 1-th (1 to 5 rounds on). The same rounds for
    every member at every honest peer: peers that marked a silent member late in different rounds
    (one joined later) wait for it in full together, and so do members that went silent together
    (an outage, or colluding ids), once per ``LATE_WINDOW`` + 1 rounds; with a round of its own
    per peer or per member, each such round cost everyone a full wait (each peer also waits for
    the others' answers)."""
    return late + 1 + (-late - 1) % (LATE_WINDOW + 1)


@dataclass
class TrustConfig:
    """Limits per sender and stage; the ``trust`` section of a recipe."""

    max_bytes: int = 2 << 20  # payload bytes (on top of the backend's own max_bytes)
    max_units: int = 1 << 20  # tokens / steps / samples its bodies hold (Body.units)
    cpu_budget: float = 2.0  # seconds of this peer's CPU to check, derive and score its bodies
    max_soft_drops: int = 8  # refused / failing bodies per round before quarantine
    quarantine_rounds: int = 3  # rounds a quarantined sender is not read
    #: bodies per sender and stage this peer redoes with the sender's committed model (core.spot_checks);
    #: 0: none of its own (faults other peers pass on are still re-checked)
    spot_checks: int = 1
    #: senders checked per stage, picked at random among those that named a model (0: every one);
    #: bounds what checking costs in a large swarm, where the proofs of other peers' checks travel
    spot_check_senders: int = 0
    #: samples redone per picked body, at random (0: all): a CPU pays a check per token
    spot_check_samples: int = 0

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_units", "max_soft_drops", "quarantine_rounds", "spot_checks", "spot_check_senders", "spot_check_samples"):
            if getattr(self, name) < 0:
                raise ValueError(f"trust.{name} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.cpu_budget < 1e6:
            raise ValueError(f"trust.cpu_budget must be > 0 seconds, got {self.cpu_budget}")


@dataclass
class SenderBook:
    """This peer's record of the senders it saw misbehave in the last ``MEMORY_ROUNDS`` rounds:
    quarantines and why, drops by kind; older entries are pruned at each ``close_round``, so a
    stream of fresh Sybil ids cannot grow it without bound (the totals by kind never shrink)."""

    config: TrustConfig = field(default_factory=TrustConfig)
    me: str = ""
    until: dict[str, int] = field(default_factory=dict)  # sender -> first round it is read again
    reasons: dict[str, str] = field(default_factory=dict)
    drops: Counter[tuple[str, DropKind]] = field(default_factory=Counter)  # (sender, kind) -> count, all rounds
    late: dict[str, set[int]] = field(default_factory=dict)  # sender -> recent rounds it was late in
    last_seen: dict[str, int] = field(default_factory=dict)  # sender -> last round it was dropped
    totals: Counter[DropKind] = field(default_factory=Counter)  # kind -> count, all senders, all rounds
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def quarantined(self, round: int) -> frozenset[str]:
        with self._lock:
            return frozenset(p for p, end in self.until.items() if round < end)

    def over_budget(self, stage: int, received: Mapping[str, Sequence[Body]], sizes: Mapping[str, int]) -> list[Drop]:
        """One drop per sender whose stage payload is over a budget (its bodies are not used)."""
        drops = []
        for peer, bodies in received.items():
            if peer == self.me:
                continue
            size, units = sizes.get(peer, 0), sum(b.units for b in bodies)
            if size > self.config.max_bytes:
                drops.append(Drop(peer, stage, None, f"{size} bytes, over trust.max_bytes={self.config.max_bytes}", DropKind.BUDGET))
            elif units > self.config.max_units:
                drops.append(Drop(peer, stage, None, f"{units} tokens/steps, over trust.max_units={self.config.max_units}", DropKind.BUDGET))
        return drops

    def close_round(self, round: int, drops: Sequence[Drop]) -> dict[str, str]:
        """Count the round's drops; quarantine who earned it. Returns newly quarantined -> why."""
        soft: Counter[str] = Counter()
        new: dict[str, str] = {}
        with self._lock:
            for d in drops:
                if d.peer_id == self.me:
                    continue
                self.totals[d.kind] += 1
                if d.kind in (
                    DropKind.COPY,
                    DropKind.VIEW,
                    DropKind.FOREIGN,
                    DropKind.LOCAL,
                ):  # framings, or honest differences: never held against anyone
                    continue
                self.drops[(d.peer_id, d.kind)] += 1
                self.last_seen[d.peer_id] = round
                if d.kind.hard and d.peer_id not in new:
                    new[d.peer_id] = f"{d.kind}: {d.reason}"
                elif d.kind is DropKind.LATE:  # remembered (asked last, not waited for), never quarantined
                    rounds = self.late.setdefault(d.peer_id, set())
                    rounds.add(round)
                    rounds.intersection_update(range(round - LATE_WINDOW + 1, round + 1))
                elif d.kind.counted:
                    soft[d.peer_id] += 1
            for peer, n in soft.items():
                if n > self.config.max_soft_drops and peer not in new:
                    new[peer] = f"{n} bodies refused in round {round} (trust.max_soft_drops={self.config.max_soft_drops})"
            for peer, why in new.items():
                if self.config.quarantine_rounds > 0:
                    self.until[peer] = round + 1 + self.config.quarantine_rounds
                    self.reasons[peer] = why
            self._forget(round)
        for peer, why in new.items():
            log.warning("%s quarantines %s for %d round(s): %s", self.me, peer, self.config.quarantine_rounds, why)
        return new

    def _forget(self, round: int) -> None:
        """Prune senders last dropped over MEMORY_ROUNDS rounds ago whose quarantine is over
        (called with the lock held; costs one pass over the senders still remembered)."""
        stale = {p for p, seen in self.last_seen.items() if seen < round - MEMORY_ROUNDS and self.until.get(p, 0) <= round + 1}
        if not stale:
            return
        for book in (self.until, self.reasons, self.late, self.last_seen):
            for peer in stale:
                book.pop(peer, None)
        for key in [k for k in self.drops if k[0] in stale]:
            del self.drops[key]

    def counters(self) -> dict[str, float]:
        """Metrics: drops by kind (all senders, all rounds)."""
        with self._lock:
            return {f"trust/dropped_{k}": float(n) for k, n in sorted(self.totals.items()) if n}


#: A game's reward rule: one reward per sample of a rollout, from this peer's task and the input it answered.
Score = Callable[[Task, StageInput, Rollout[Any]], Sequence[float]]


def score_under_budget(state: GameState, score: Score, stage: int | None = None, cpu_budget: float = math.inf) -> RoundRewards:
    """Score every accepted rollout of ``stage`` (all if None), each sender under its budget.

    Scoring a peer's body is game code running on a stranger's data: if it raises, that body is
    dropped for the round (``scoring``, counted against its sender), never the peer. A sender is
    charged the CPU its bodies take on this thread plus what sandboxes and services report doing
    for it (``core.meter``), which also cut a body off when the sender's ``cpu_budget`` runs out;
    past it, the sender loses the rest of its bodies (``cpu``). A sandbox that could not run at
    all (``Unavailable``) is this peer's problem: ``local``, never counted. Errors on this peer's
    own rollouts are bugs and propagate, except a sandbox's cut-off (``CutOff``)."""
    scored, spent = [], defaultdict[str, float](float)
    for r in state.select(stage=stage):
        own = r.peer_id == state.peer_id
        if not own and spent[r.peer_id] > cpu_budget:
            state.drops.append(Drop(r.peer_id, r.stage, r.task_id, f"scoring its bodies took over {cpu_budget:.2f}s of CPU", DropKind.CPU))
            continue
        start = time.thread_time()
        with metered(r.peer_id, math.inf if own else cpu_budget - spent[r.peer_id]) as elsewhere:
            try:
                rewards = [float(x) for x in score(state.tasks[r.task_id], state.input_for(r), r)]
                if len(rewards) != r.body.num_samples:
                    raise ValueError(f"{_owner(score)}.score gave {len(rewards)} rewards for {r.body.num_samples} samples")
            except Exception as e:  # noqa: BLE001 - isolated per sender, see docstring
                if own and not isinstance(e, CutOff):
                    raise
                kind = DropKind.LOCAL if isinstance(e, Unavailable) else DropKind.SCORING  # this peer's failing is not the sender's
                state.drops.append(Drop(r.peer_id, r.stage, r.task_id, f"scoring failed: {type(e).__name__}: {e}", kind))
                log.warning("%s: scoring %s's body failed (%s); dropped", state.peer_id, r.peer_id, e)
                continue
            finally:
                spent[r.peer_id] += time.thread_time() - start + elsewhere.spent
        scored.append(ScoredRollout(r, tuple(rewards)))
    return RoundRewards(state.round, tuple(scored))


def _owner(score: Score) -> str:
    """The reward manager's class name, for the error that names who broke the contract."""
    owner = getattr(score, "__self__", None)
    return type(owner).__name__ if owner is not None else getattr(score, "__qualname__", "score")
