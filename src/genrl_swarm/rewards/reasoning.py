"""Verifiable rewards: accuracy through Reasoning Gym's own scorers, plus an optional format reward."""

from __future__ import annotations

from typing import Any

from genrl_swarm.core import RewardManager, Rollout, Task
from genrl_swarm.lm.answers import answers_match, extract_for, well_formatted


def accuracy(task: Task, completion: str) -> float:
    """Score of the completion's extracted answer: Reasoning Gym's scorer for its tasks,
    numeric/string equality for file tasks. Never the reward a peer claimed."""
    answer = extract_for(task.answer, completion)
    entry: dict[str, Any] | None = task.metadata.get("entry")
    if entry is not None:
        import reasoning_gym

        return float(reasoning_gym.get_score_answer_fn(task.metadata["dataset"])(answer=answer, entry=entry))
    return 1.0 if task.answer is not None and answers_match(answer, task.answer) else 0.0


class ReasoningReward(RewardManager):
    def __init__(self, accuracy_weight: float = 1.0, format_weight: float = 0.0) -> None:
        self.accuracy_weight, self.format_weight = accuracy_weight, format_weight

    def score(self, task: Task, rollout: Rollout) -> list[float]:
        return [
            self.accuracy_weight * accuracy(task, c) + self.format_weight * float(well_formatted(c))
            for c in rollout.completions
        ]
