"""GameManager: the framework-defined progression, the same on every peer.

    for round r:   tasks = data.tasks_for(r, me)     (the shared round_tasks(r), or this peer's own)
        for stage s: inputs -> policy.act -> comm.exchange -> views.rebuild -> admission (checked per body)
                     -> checks.run (bodies redone with the committed model: core.spot_checks)
        rewards = reward.score_state(state)    (local truth, also for the swarm's rollouts)
        learner.train(state, rewards); policy.load_weights(learner.weights())
        coordinator.report(result)

Everything else (logging, checkpoints, progress) hangs off the named hooks.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from genrl_swarm.core.admission import Rules, StageAdmission
from genrl_swarm.core.bodies import MAX_BASIS, Body
from genrl_swarm.core.decoders import envelope_decoder
from genrl_swarm.core.interfaces import (
    ActSeed,
    Communication,
    Coordinator,
    DataManager,
    ExchangeResult,
    Learner,
    Policy,
    RewardManager,
    RunInterrupted,
)
from genrl_swarm.core.newcomers import Newcomers
from genrl_swarm.core.spot_checks import SpotChecks
from genrl_swarm.core.state import GameState
from genrl_swarm.core.trust import SenderBook, TrustConfig
from genrl_swarm.core.types import Drop, DropKind, Ref, Rollout, RoundResult, RoundRewards, ScoredRollout, StageInput, tie_break
from genrl_swarm.core.views import Rebuilt, Views

log = logging.getLogger(__name__)


@dataclass
class GameConfig:
    """How the loop runs; the ``game`` section of a recipe."""

    num_stages: int = 1
    max_rounds: int = 10
    train_every: Literal["round", "stage"] = "round"
    mode: Literal["train", "evaluate", "train_and_evaluate"] = "train"
    eval_every: int = 0  # rounds between evaluations in train_and_evaluate; 0 = at the end only
    exchange_timeout: float = 30.0  # seconds each exchange may wait for the swarm
    max_jump: int = 10  # rounds a peer that fell behind may skip at once on the transport's word
    #: Senders whose earlier answers a later-stage input is built from: this peer and the others
    #: first by ``tie_break`` (a hash every peer computes alike), so the prompt stays bounded and
    #: peers that received the same payloads build the same inputs.
    max_sources: int = 16

    def __post_init__(self) -> None:
        for name, ok, rule in (
            ("num_stages", self.num_stages >= 1, ">= 1"),
            ("max_rounds", self.max_rounds >= 0, ">= 0"),
            ("eval_every", self.eval_every >= 0, ">= 0"),
            ("max_jump", self.max_jump >= 0, ">= 0"),
            ("max_sources", 1 <= self.max_sources <= 64, "between 1 and 64"),
            ("exchange_timeout", 0 < self.exchange_timeout < 1e7, "> 0 and finite"),
        ):
            if not ok:
                raise ValueError(f"{name} must be {rule}, got {getattr(self, name)!r}")
        # A later-stage payload names its sources' payloads of every earlier stage; receivers
        # refuse (and quarantine) an envelope naming more than MAX_BASIS, so no honest config may.
        if self.max_sources * (self.num_stages - 1) > MAX_BASIS:
            raise ValueError(
                f"max_sources x (num_stages - 1) must be <= {MAX_BASIS} (the payloads a later-stage payload may name), "
                f"got {self.max_sources} x {self.num_stages - 1}; lower max_sources"
            )


@dataclass
class Hooks:
    """Named extension points, called in registration order."""

    after_stage: list[Callable[[GameManager, GameState, int, ExchangeResult], None]] = field(default_factory=list)
    after_rewards: list[Callable[[GameManager, GameState, RoundRewards], None]] = field(default_factory=list)
    after_round: list[Callable[[GameManager, RoundResult], None]] = field(default_factory=list)
    after_game: list[Callable[[GameManager, list[RoundResult]], None]] = field(default_factory=list)


class GameManager:
    def __init__(
        self,
        data: DataManager,
        reward: RewardManager,
        policy: Policy,
        learner: Learner | None,
        comm: Communication,
        coordinator: Coordinator,
        config: GameConfig | None = None,
        hooks: Hooks | None = None,
        start_round: int = 0,
        trust: TrustConfig | None = None,
    ) -> None:
        self.data, self.reward, self.policy, self.learner = data, reward, policy, learner
        self.comm, self.coordinator = comm, coordinator
        self.config = config or GameConfig()
        self.hooks = hooks or Hooks()
        self.start_round = start_round  # > 0 when resuming from a checkpoint
        self.interrupted = False
        self._stop = threading.Event()
        self.book = SenderBook(trust or TrustConfig(), comm.peer_id)
        self.newcomers = Newcomers(comm.peer_id)  # ids without history: a few read a round where reading one costs a task rebuild
        self.views = Views(comm.peer_id, comm, data, policy, self.config.max_sources, self.book.config.cpu_budget)  # senders that saw other payloads
        trusted = self.book.config  # spot checks: bodies redone with the committed model
        self.checks = SpotChecks(comm.peer_id, comm, policy, trusted.spot_checks, trusted.spot_check_senders, trusted.spot_check_samples)
        comm.claim_account(coordinator.account)  # signed into commitments: how peers credit it on chain
        data.attach(self)
        envelope_decoder(policy.body_type)  # built now, before the peer threads decode at once (core.decoders)

    @property
    def peer_id(self) -> str:
        return self.comm.peer_id

    def run(self, keep_results: bool = True) -> list[RoundResult]:
        """Play every round; the results, or none with ``keep_results=False``: each result
        streams to the ``after_round`` hooks anyway, and a peer playing unlimited rounds must
        not keep one per round until it ends."""
        self.coordinator.register(self.peer_id)
        results: list[RoundResult] = []
        played = 0
        try:
            if self.config.mode == "evaluate":
                results.append(RoundResult(self.start_round, self.peer_id, {}, (), self.evaluate()))
            r = self._next_round(self.start_round)
            while self.config.mode != "evaluate" and r < self.config.max_rounds:
                result = self.play_round(r)
                played += 1
                if keep_results:
                    results.append(result)
                r = self._next_round(r + 1)
        except RunInterrupted:
            self.interrupted = True
            log.info("%s stopped by request after %d round(s)", self.peer_id, played)
        finally:  # an error too: the peers still playing must not wait for this one's reports
            self.coordinator.leave(self.peer_id)
        _fire(self.hooks.after_game, self, results)
        return results

    def play_round(self, r: int) -> RoundResult:
        state, metrics, staged = GameState(r, self.peer_id), dict[str, float](), list[ScoredRollout]()
        state.set_tasks(self.data.tasks_for(r, self.peer_id))
        self.policy.begin_round(ActSeed(self.comm.settled_epoch(), r, self.peer_id))  # seeded draws (lm.seeding)
        per_stage, budget = self.config.train_every == "stage", self.book.config.cpu_budget
        for s in range(self.config.num_stages):
            inputs, basis = self._stage_inputs(state, s)
            with _timed(metrics, f"time/generate_s{s}"):
                bodies = self._act(inputs, s)
            exchange = self._receive(state, s, inputs, bodies, basis, metrics)
            _fire(self.hooks.after_stage, self, state, s, exchange)
            if per_stage:
                stage_rewards = self.reward.score_state(state, s, budget)
                staged += stage_rewards.scored
                metrics |= self._train(state, stage_rewards, f"_s{s}")
        if per_stage:  # each stage was scored once: scoring again would count its drops twice
            kept = {id(x) for x in state.rollouts}  # minus senders later stage inputs dropped
            rewards = RoundRewards(r, tuple(x for x in staged if id(x.rollout) in kept))
        else:
            rewards = self.reward.score_state(state, cpu_budget=budget)
        _fire(self.hooks.after_rewards, self, state, rewards)
        if not per_stage:
            metrics |= self._train(state, rewards, "")
        if self._eval_due(r):
            metrics |= self.evaluate()
        self.book.close_round(r, state.drops)
        self.newcomers.close_round(r, {x.peer_id for x in state.rollouts})
        metrics |= self.book.counters() | {"trust/quarantined": float(len(self.book.quarantined(r + 1)))}
        result = RoundResult(r, self.peer_id, rewards.mean_by_peer(), rewards.winners(), metrics, state.drops_by_peer(), rewards.mean_by_stage())
        self.coordinator.report(result)
        self.coordinator.finish_round(r)
        _fire(self.hooks.after_round, self, result)
        return result

    def _receive(
        self, state: GameState, s: int, inputs: list[StageInput], bodies: list[Body], basis: tuple[Ref, ...], metrics: dict[str, float]
    ) -> ExchangeResult:
        """One stage's exchange and what this peer keeps of it: the swarm's bodies, later-stage
        senders' inputs rebuilt from the payloads they name (fetched where missing: ``core.views``),
        each body checked and stored (``core.admission``), each sender charged what reading,
        fetching and checking its bodies cost."""
        mark, budget = len(state.drops), self.book.config.cpu_budget
        with _timed(metrics, f"time/exchange_s{s}"):
            exchange, received, deadline = self._exchange(state, state.round, s, bodies, basis)
            rebuilt = self.views.rebuild(state, s, basis, exchange, received, deadline)
        tasks_of = functools.partial(self.data.tasks_for, state.round) if self.data.per_peer and s == 0 else None
        rules = Rules(self.policy.check, self.policy.texts, self.data.tasks_differ)
        charged = _add(exchange.costs, rebuilt.costs)
        admission = StageAdmission(state, s, inputs, rules, cpu_budget=budget, tasks_of=tasks_of, rebuilt=rebuilt.inputs, charged=charged)
        admission.admit(received)
        left = max(deadline - time.monotonic(), 0.1 * self.config.exchange_timeout)  # fetching committed models
        metrics |= self.checks.run(state, s, exchange, received, left, self.book.quarantined(state.round))
        metrics |= {f"swarm/peers_s{s}": len(received), f"swarm/refused_s{s}": len(state.drops) - mark}
        if s > 0:  # differences of view: the exception now, counted per stage
            metrics |= {f"views/fetched_s{s}": rebuilt.fetched, f"views/dropped_s{s}": _view_drops(state.drops[mark:], rebuilt)}
        return exchange

    def _exchange(
        self, state: GameState, r: int, s: int, bodies: Sequence[Body], basis: Sequence[Ref]
    ) -> tuple[ExchangeResult, dict[str, tuple[Body, ...]], float]:
        """Send this stage's bodies; what the swarm sent, minus payloads dropped by the backend,
        proven equivocators, senders over their budgets and, where reading a sender costs a
        rebuild of its tasks (per-peer questions), newcomers past the round's admissions (each
        drop recorded in ``state``); and the stage's deadline (monotonic), which fetches keep."""
        body_type, quarantined = self.policy.body_type, self.book.quarantined(r)
        deadline = time.monotonic() + self.config.exchange_timeout
        self.comm.commit_model(self.policy.committed_model())  # the model these bodies were drawn with, signed with them
        exchange = self.comm.exchange(r, s, bodies, self.config.exchange_timeout, body_type, quarantined, basis)
        self._check_stop()
        self.coordinator.learn_accounts(exchange.accounts)
        drops = [Drop(p, s, None, why, DropKind.LATE if p in exchange.late else DropKind.PAYLOAD) for p, why in exchange.dropped.items()]
        drops += [Drop(p, s, None, why, DropKind.EQUIVOCATION) for p, why in exchange.equivocators.items()]
        drops += self.book.over_budget(s, exchange.received, exchange.sizes)
        if self.data.per_peer:  # a newcomer dropped above takes no admission
            drops += self.newcomers.turn_away(r, s, exchange.received.keys() - {d.peer_id for d in drops}, exchange.vouched)
        state.drops.extend(drops)
        over = {d.peer_id for d in drops}
        received = {peer: b for peer, b in exchange.received.items() if peer not in over}
        state.sources[s] = {p: d for p, d in exchange.digests.items() if p in received}
        return exchange, received, deadline

    def _sources(self, state: GameState, stage: int) -> tuple[Ref, ...]:
        """The earlier payloads this peer builds stage ``stage``'s inputs from: its own and those
        of the first ``max_sources - 1`` other senders of stage 0 by ``tie_break``."""
        others = sorted({x.peer_id for x in state.select(stage=0)} - {self.peer_id}, key=lambda p: tie_break(state.round, p))
        return state.refs(stage, [self.peer_id, *others[: self.config.max_sources - 1]])

    def _stage_inputs(self, state: GameState, stage: int) -> tuple[list[StageInput], tuple[Ref, ...]]:
        """``data.stage_inputs`` and the earlier payloads they are built from (``_sources``),
        isolated per sender: if building later-stage inputs fails on the swarm's rollouts, each
        sender is tried alone with this peer's own; those it fails on are dropped from the round
        and the inputs are built without them."""
        if stage == 0:
            return self.data.stage_inputs(state, 0), ()
        basis = self._sources(state, stage)
        try:
            return self.data.stage_inputs(state.view(basis), stage), basis
        except Exception as error:  # noqa: BLE001 - retried per sender below; re-raised if it is ours
            culprits = []
            for peer in sorted({r.sender for r in basis} - {self.peer_id}):
                try:
                    self.data.stage_inputs(state.view([r for r in basis if r.sender in (peer, self.peer_id)]), stage)
                except Exception as e:  # noqa: BLE001 - this sender's bodies break game code
                    culprits.append(Drop(peer, stage, None, f"building stage-{stage} inputs failed: {type(e).__name__}: {e}", DropKind.SCORING))
            if not culprits:
                raise error
            bad = {d.peer_id for d in culprits}
            state.rollouts = [x for x in state.rollouts if x.peer_id not in bad]
            for by in state.sources.values():
                for peer in bad:
                    by.pop(peer, None)
            state.drops.extend(culprits)
            basis = self._sources(state, stage)
            return self.data.stage_inputs(state.view(basis), stage), basis

    def stop(self) -> None:
        """Ask this peer to stop soon (from another thread): the current act or exchange ends
        early and ``run`` returns the rounds played so far."""
        self._stop.set()
        self.policy.interrupt()
        self.comm.interrupt()

    def evaluate(self) -> dict[str, float]:
        """Mean reward of greedy actions on the held-out tasks (stage 0)."""
        tasks = self.data.eval_tasks()
        if not tasks:
            return {}
        inputs = [t.input(0) for t in tasks]
        bodies = self.policy.act(inputs, 0, greedy=True)
        total, count = 0.0, 0
        for task, inp, body in zip(tasks, inputs, bodies):
            rewards = self.reward.score(task, inp, Rollout("eval", 0, 0, body, self.policy.texts(body)))
            total, count = total + sum(rewards), count + len(rewards)
        return {"eval/reward": total / max(count, 1)}

    def _next_round(self, wanted: int) -> int:
        """``wanted``, or the swarm's round when this peer fell behind (logged with the rounds
        it skips). The transport's word moves a peer at most ``max_jump`` rounds at a time (a
        lie costs a few rounds, never the run); the coordinator's (local, or the chain) is trusted."""
        self._check_stop()
        told = min(self.comm.swarm_round(), wanted + self.config.max_jump)
        swarm = max(self.coordinator.current_round(), told)
        if swarm > wanted and wanted < self.config.max_rounds:
            skipped = min(swarm, self.config.max_rounds) - 1
            log.warning("%s is behind the swarm: jumps from round %d to %d, skipping rounds %d-%d",
                        self.peer_id, wanted, swarm, wanted, skipped)  # fmt: skip
            return swarm
        return wanted

    def _act(self, inputs: Sequence[StageInput], stage: int) -> list[Body]:
        bodies = self.policy.act(inputs, stage) if inputs else []
        if len(bodies) != len(inputs):
            raise ValueError(f"policy.act returned {len(bodies)} bodies for {len(inputs)} inputs")
        return bodies

    def _train(self, state: GameState, rewards: RoundRewards, suffix: str) -> dict[str, float]:
        if self.learner is None:
            return {}
        start = time.perf_counter()
        metrics = {f"{k}{suffix}": v for k, v in self.learner.train(state, rewards).items()}
        self.policy.load_weights(self.learner.weights())
        return metrics | {f"time/train{suffix}": time.perf_counter() - start}

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise RunInterrupted

    def _eval_due(self, r: int) -> bool:
        if self.config.mode != "train_and_evaluate":
            return False
        last = r == self.config.max_rounds - 1
        return last or (self.config.eval_every > 0 and (r + 1) % self.config.eval_every == 0)


def _add(*costs: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds per sender, summed over where they were spent (reading, fetching, rebuilding)."""
    total: dict[str, float] = {}
    for by_sender in costs:
        for peer, seconds in by_sender.items():
            total[peer] = total.get(peer, 0.0) + seconds
    return total


def _view_drops(drops: Sequence[Drop], rebuilt: Rebuilt) -> int:
    """Bodies of a stage dropped as a difference of view: whole senders at the rebuild, and
    single bodies answering another input than the one rebuilt."""
    return rebuilt.dropped + sum(1 for d in drops if d.kind is DropKind.VIEW and d.task_id is not None)


def _fire(hooks: Sequence[Callable[..., None]], *args: object) -> None:
    for hook in hooks:
        hook(*args)


@contextmanager
def _timed(metrics: dict[str, float], key: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    metrics[key] = time.perf_counter() - start
