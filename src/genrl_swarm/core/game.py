"""GameManager: the framework-defined progression, the same on every peer.

    for round r:   tasks = data.round_tasks(r)
        for stage s: inputs -> trainer.generate -> comm.exchange -> state.record
        rewards = reward.score_state(state)    (local, also for the swarm's rollouts)
        trainer.train(state, rewards)          (per round, or per stage)
        coordinator.report(result)

Everything else (logging, checkpoints, progress) hangs off the named hooks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from genrl_swarm.core.interfaces import (
    Communication,
    Coordinator,
    DataManager,
    ExchangeResult,
    RewardManager,
    Trainer,
)
from genrl_swarm.core.state import GameState
from genrl_swarm.core.types import Rollout, RoundResult, RoundRewards, Task


@dataclass
class GameConfig:
    """How the loop runs; the ``game`` section of a recipe."""

    num_stages: int = 1
    max_rounds: int = 10
    train_every: Literal["round", "stage"] = "round"
    mode: Literal["train", "evaluate", "train_and_evaluate"] = "train"
    eval_every: int = 0  # rounds between evaluations in train_and_evaluate; 0 = at the end only
    exchange_timeout: float = 30.0  # seconds each exchange may wait for the swarm

    def __post_init__(self) -> None:
        if self.num_stages < 1 or self.max_rounds < 0 or self.eval_every < 0 or self.exchange_timeout <= 0:
            raise ValueError(f"invalid game config: {self}")


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
        trainer: Trainer,
        comm: Communication,
        coordinator: Coordinator,
        config: GameConfig | None = None,
        hooks: Hooks | None = None,
        start_round: int = 0,
    ) -> None:
        self.data, self.reward, self.trainer = data, reward, trainer
        self.comm, self.coordinator = comm, coordinator
        self.config = config or GameConfig()
        self.hooks = hooks or Hooks()
        self.start_round = start_round  # > 0 when resuming from a checkpoint

    @property
    def peer_id(self) -> str:
        return self.comm.peer_id

    def run(self) -> list[RoundResult]:
        self.coordinator.register(self.peer_id)
        if self.config.mode == "evaluate":
            results = [RoundResult(self.start_round, self.peer_id, {}, (), self.evaluate())]
        else:
            results, r = [], max(self.start_round, self._swarm_round())
            while r < self.config.max_rounds:
                results.append(self.play_round(r))
                r = max(r + 1, self._swarm_round())  # a peer that fell behind catches up
        _fire(self.hooks.after_game, self, results)
        return results

    def play_round(self, r: int) -> RoundResult:
        state, metrics = GameState(r, self.peer_id), dict[str, float]()
        state.set_tasks(self.data.round_tasks(r))
        per_stage = self.config.train_every == "stage"
        for s in range(self.config.num_stages):
            inputs = self.data.stage_inputs(state, s)
            with _timed(metrics, f"time/generate_s{s}"):
                rollouts = self._rollouts(r, s, inputs, self.trainer.generate(inputs, s))
            with _timed(metrics, f"time/exchange_s{s}"):
                exchange = self.comm.exchange(r, s, rollouts, self.config.exchange_timeout)
            state.record(s, inputs, exchange.received)
            metrics |= {f"swarm/peers_s{s}": len(exchange.received), f"swarm/dropped_s{s}": len(exchange.dropped)}
            _fire(self.hooks.after_stage, self, state, s, exchange)
            if per_stage:
                metrics |= self._train(state, self.reward.score_state(state, stage=s), f"_s{s}")
        rewards = self.reward.score_state(state)
        _fire(self.hooks.after_rewards, self, state, rewards)
        if not per_stage:
            metrics |= self._train(state, rewards, "")
        if self._eval_due(r):
            metrics |= self.evaluate()
        result = RoundResult(r, self.peer_id, rewards.mean_by_peer(), rewards.winners(), metrics)
        self.coordinator.report(result)
        self.coordinator.finish_round(r)
        _fire(self.hooks.after_round, self, result)
        return result

    def _swarm_round(self) -> int:
        """Where the swarm is: the coordinator's round, or the highest round peers announced."""
        return max(self.coordinator.current_round(), self.comm.swarm_round())

    def evaluate(self) -> dict[str, float]:
        return self.trainer.evaluate(self.data.eval_tasks(), self.reward)

    def _train(self, state: GameState, rewards: RoundRewards, suffix: str) -> dict[str, float]:
        start = time.perf_counter()
        metrics = {f"{k}{suffix}": v for k, v in self.trainer.train(state, rewards).items()}
        return metrics | {f"time/train{suffix}": time.perf_counter() - start}

    def _rollouts(self, r: int, s: int, inputs: Sequence[Task], outputs: Sequence[Sequence[str]]) -> list[Rollout]:
        if len(outputs) != len(inputs):
            raise ValueError(f"trainer.generate returned {len(outputs)} outputs for {len(inputs)} tasks")
        return [Rollout(self.peer_id, r, s, t.id, t.prompt, tuple(c)) for t, c in zip(inputs, outputs) if c]

    def _eval_due(self, r: int) -> bool:
        if self.config.mode != "train_and_evaluate":
            return False
        last = r == self.config.max_rounds - 1
        return last or (self.config.eval_every > 0 and (r + 1) % self.config.eval_every == 0)


def _fire(hooks: Sequence[Callable[..., None]], *args: object) -> None:
    for hook in hooks:
        hook(*args)


@contextmanager
def _timed(metrics: dict[str, float], key: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    metrics[key] = time.perf_counter() - start
