"""Verifiable rewards: accuracy through Reasoning Gym's own scorers, plus an optional format reward.

Scores are computed on this peer from its private task (answer, Reasoning Gym entry) and the
text this peer decoded from the rollout's ids (``rollout.texts``): nothing a sender claims
about its own rollout is read.
"""

from __future__ import annotations

from typing import Any

from genrl_swarm.core import RewardManager, Rollout, StageInput, Task
from genrl_swarm.lm.answers import answers_match, extract_for, well_formatted


def accuracy(task: Task, completion: str) -> float:
    """Score of the completion's extracted answer: Reasoning Gym's scorer for its tasks,
    numeric/string equality for file tasks."""
    answer = extract_for(task.answer, completion)
    entry: dict[str, Any] | None = task.metadata.get("entry")
    if entry is not None:
        import reasoning_gym

        return float(reasoning_gym.get_score_answer_fn(task.metadata["dataset"])(answer=answer, entry=entry))
    return 1.0 if task.answer is not None and answers_match(answer, task.answer) else 0.0


class ReasoningReward(RewardManager):
    """``accuracy_weight`` x accuracy + ``format_weight`` x (exactly one ``<answer>`` block)."""

    def __init__(self, accuracy_weight: float = 1.0, format_weight: float = 0.0) -> None:
        self.accuracy_weight, self.format_weight = accuracy_weight, format_weight

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        return [
            self.accuracy_weight * accuracy(task, text) + self.format_weight * float(well_formatted(text))
            for text in rollout.texts
        ]
