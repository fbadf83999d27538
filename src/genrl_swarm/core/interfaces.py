"""The five interfaces a game is assembled from.

Each is a small abstract class with the exact signatures ``GameManager`` calls; a game
implements DataManager, RewardManager and Trainer, and picks a Communication backend and a
Coordinator from the library.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from genrl_swarm.core.state import GameState
from genrl_swarm.core.types import Rollout, RoundResult, RoundRewards, ScoredRollout, Task


class DataManager(ABC):
    """Makes each round's tasks and each stage's prompts.

    ``round_tasks`` must be a pure function of (swarm seed, round) so that peers sharing a
    seed draw the same questions without talking.
    """

    @abstractmethod
    def round_tasks(self, round: int) -> list[Task]: ...

    def stage_inputs(self, state: GameState, stage: int) -> list[Task]:
        """Prompts for ``stage``. Stage 0 shows the tasks; multi-stage games override this to
        build later prompts from the own and swarm rollouts recorded in ``state``."""
        if stage == 0:
            return list(state.tasks.values())
        raise NotImplementedError(f"{type(self).__name__} has no stage {stage}: override stage_inputs")

    def eval_tasks(self) -> list[Task]:
        """A held-out split for evaluation; empty when the game has none."""
        return []


class RewardManager(ABC):
    """Turns completions into rewards, always computed locally from the task's ground truth."""

    @abstractmethod
    def score(self, task: Task, rollout: Rollout) -> list[float]:
        """One reward per completion of ``rollout`` (which answers ``task``)."""

    def score_state(self, state: GameState, stage: int | None = None) -> RoundRewards:
        """Score every recorded rollout (own and swarm) of ``stage`` (all stages if None).

        A peer's rollout for a task this peer does not know cannot be checked and is left out.
        """
        scored, unknown = [], 0
        for r in state.select(stage=stage):
            task = state.tasks.get(r.task_id)
            if task is None:
                unknown += 1
                continue
            rewards = self.score(task, r)
            if len(rewards) != len(r.completions):
                raise ValueError(
                    f"{type(self).__name__}.score gave {len(rewards)} rewards for {len(r.completions)} completions"
                )
            scored.append(ScoredRollout(r, tuple(float(x) for x in rewards)))
        return RoundRewards(tuple(scored), unknown)


class Trainer(ABC):
    """Owns the policy: generates completions and updates the policy from rewards."""

    @abstractmethod
    def generate(self, tasks: Sequence[Task], stage: int) -> list[list[str]]:
        """Completions for each task (outer list aligned with ``tasks``)."""

    @abstractmethod
    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        """Update the policy; returns metrics to log. ``rewards`` covers the stage(s) just played."""

    def evaluate(self, tasks: Sequence[Task], reward: RewardManager) -> dict[str, float]:
        """Mean reward on held-out tasks (stage 0). Trainers may override, e.g. to decode greedily."""
        if not tasks:
            return {}
        outputs = self.generate(tasks, stage=0)
        total, count = 0.0, 0
        for task, completions in zip(tasks, outputs):
            rollout = Rollout("eval", 0, 0, task.id, task.prompt, tuple(completions))
            rewards = reward.score(task, rollout)
            total, count = total + sum(rewards), count + len(rewards)
        return {"eval/reward": total / max(count, 1)}

    @abstractmethod
    def save(self, directory: Path) -> None:
        """Write everything needed to continue training (weights, optimiser, RNG) into ``directory``."""

    @abstractmethod
    def load(self, directory: Path) -> None: ...


@dataclass(frozen=True)
class ExchangeResult:
    """Outcome of one exchange: who answered, who was dropped and why."""

    received: dict[str, tuple[Rollout, ...]]  # peer id -> rollouts, this peer's own included
    dropped: dict[str, str] = field(default_factory=dict)  # sender -> reason
    expected: int | None = None  # peers the backend waited for, when it knows

    def summary(self) -> str:
        want = "?" if self.expected is None else str(self.expected)
        bad = f", dropped {len(self.dropped)}" if self.dropped else ""
        return f"got {len(self.received)} of {want}{bad}"


class Communication(ABC):
    """Exchanges this peer's rollouts with the swarm for one (round, stage), under a deadline."""

    @property
    @abstractmethod
    def peer_id(self) -> str: ...

    @abstractmethod
    def exchange(self, round: int, stage: int, rollouts: Sequence[Rollout], timeout: float) -> ExchangeResult:
        """Send ``rollouts``; return what the swarm sent for the same (round, stage).

        Must return by ``timeout`` seconds with whatever arrived; never raises on a peer's bad
        or missing payload.
        """

    def swarm_round(self) -> int:
        """The highest round the swarm is known to play (0 if the backend cannot tell)."""
        return 0

    def close(self) -> None:
        """Release sockets, daemons and process groups."""


class Coordinator(ABC):
    """The referee: who is in, which round it is, who earned what."""

    #: One instance serves every peer of a process (in-process referee); False: one per peer
    #: (e.g. one chain account each).
    shared_per_process: ClassVar[bool] = True

    @abstractmethod
    def register(self, peer_id: str) -> None: ...

    @abstractmethod
    def current_round(self) -> int:
        """The swarm's round; a peer that is behind jumps to it."""

    @abstractmethod
    def report(self, result: RoundResult) -> None:
        """Submit this peer's locally computed rewards and winner votes for a round."""

    def finish_round(self, round: int) -> None:
        """Called when this peer finished ``round``; coordinators with the role advance it."""

    def standings(self) -> Mapping[str, float]:
        """Cumulative reward per peer, where the coordinator keeps it."""
        return {}
