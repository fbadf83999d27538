from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from genrl_swarm.config import load_recipe
from genrl_swarm.core import DataManager, GameState, RewardManager, Rollout, RoundRewards, Task, Trainer


# Tiny random models are built once per machine into this cache (never the user's home cache).
os.environ.setdefault("GENRL_SWARM_CACHE", str(Path(__file__).parents[1] / ".pytest_cache" / "genrl_swarm"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


class RecordingGame(DataManager, RewardManager, Trainer):
    """One object playing data, reward and trainer, logging every call the loop makes."""

    def __init__(self, log: list[str], tasks: int = 2) -> None:
        self.log, self.tasks = log, tasks
        self.trained: list[RoundRewards] = []

    def round_tasks(self, round: int) -> list[Task]:
        self.log.append(f"tasks r{round}")
        return [Task.create(f"q{round}-{i}", answer="a") for i in range(self.tasks)]

    def stage_inputs(self, state: GameState, stage: int) -> list[Task]:
        self.log.append(f"inputs s{stage}")
        return [t.with_prompt(f"{t.prompt}@s{stage}") for t in state.tasks.values()]

    def generate(self, tasks: Sequence[Task], stage: int) -> list[list[str]]:
        self.log.append(f"generate s{stage}")
        return [["a", "b"] for _ in tasks]

    def score(self, task: Task, rollout: Rollout) -> list[float]:
        return [1.0 if c == task.answer else 0.0 for c in rollout.completions]

    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        self.log.append("train " + ",".join(sorted({f"s{s.rollout.stage}" for s in rewards.scored})))
        self.trained.append(rewards)
        return {"loss": 0.0}

    def save(self, directory: Path) -> None:
        (directory / "w").write_text("x")

    def load(self, directory: Path) -> None:
        pass


@pytest.fixture
def bandit_recipe(tmp_path: Path):
    """The packaged bandit recipe, quiet and writing under tmp_path; pass more overrides."""

    def make(*overrides: str):
        base = [f"run.dir={tmp_path / 'run'}", "run.tensorboard=false", "run.console=false"]
        return load_recipe("bandit", [*base, *overrides])

    return make
