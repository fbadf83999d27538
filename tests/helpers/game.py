"""A test game: ``Echo`` bodies and ``RecordingGame``, one object playing data, reward, policy and
learner that logs every call the loop makes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from genrl_swarm.core import (
    Body,
    DataManager,
    GameState,
    Learner,
    Policy,
    RewardManager,
    Rollout,
    RoundRewards,
    StageInput,
    Task,
    Weights,
)


class Echo(Body, frozen=True, tag="echo"):
    """A test body: short strings the 'policy' produced."""

    outputs: tuple[str, ...]

    @property
    def num_samples(self) -> int:
        return len(self.outputs)


def echo(inp: StageInput, *outputs: str) -> Echo:
    return Echo(inp.task_id, inp.digest, outputs)


class RecordingGame(DataManager, RewardManager, Policy, Learner):
    """One object playing data, reward, policy and learner, logging every call the loop makes."""

    body_type = Echo

    def __init__(self, log: list[str], tasks: int = 2) -> None:
        self.log, self.tasks = log, tasks
        self.trained: list[RoundRewards] = []
        self.seen_inputs: list[StageInput] = []
        self.version = 0

    def round_tasks(self, round: int) -> list[Task]:
        self.log.append(f"tasks r{round}")
        return [Task.create(f"q{round}-{i}", answer="a", secret="only for scoring") for i in range(self.tasks)]

    def stage_inputs(self, state: GameState, stage: int) -> list[StageInput]:
        self.log.append(f"inputs s{stage}")
        return [t.input(stage, f"{t.prompt}@s{stage}") for t in state.tasks.values()]

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        self.log.append(f"act s{stage}")
        self.seen_inputs.extend(inputs)
        return [echo(i, "a", "b") for i in inputs]

    def texts(self, body: Body) -> tuple[str, ...]:
        assert isinstance(body, Echo)
        return body.outputs

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        return [1.0 if c == task.answer else 0.0 for c in rollout.texts]

    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        self.log.append("train " + ",".join(sorted({f"s{s.rollout.stage}" for s in rewards.scored})))
        self.trained.append(rewards)
        self.version += 1
        return {"loss": 0.0}

    def weights(self) -> Weights:
        return Weights(self.version, None)

    def load_weights(self, weights: Weights) -> None:
        self.version = weights.version

    def save(self, directory: Path) -> None:
        (directory / "w").write_text(str(self.version))

    def load(self, directory: Path) -> None:
        self.version = int((directory / "w").read_text())
