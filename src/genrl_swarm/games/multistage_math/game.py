"""Multistage math: answer, judge the swarm's answers, revise.

Stage 0: each peer answers the question. Stage 1: it sees every peer's answer as
"Student #k: ..." and picks the best ("Choice: Student #k"). Stage 2: it sees the answers
and the swarm's choices and gives a final answer. Each stage has its own reward, recomputed
locally from the question's ground truth.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from genrl_swarm.core import DataManager, GameState, RewardManager, Rollout, Task
from genrl_swarm.data.reasoning_gym import ReasoningGymData
from genrl_swarm.lm.answers import extract_answer
from genrl_swarm.rewards.reasoning import accuracy

MATH_DATASETS = ("basic_arithmetic", "chain_sum", "decimal_arithmetic", "fraction_simplification", "simple_equations")
_STUDENT_LINE = re.compile(r"^Student #(\d+): (.*)$", re.MULTILINE)
_CHOICE = re.compile(r"Choice:\s*Student\s*#\s*(\d+)", re.IGNORECASE)


def consensus(rollout: Rollout) -> str:
    """A peer's answer: the most common extracted answer among its completions."""
    answers = [a for a in (extract_answer(c) for c in rollout.completions) if a]
    return Counter(answers).most_common(1)[0][0].replace("\n", " ") if answers else "(no answer)"


def students(state: GameState, task_id: str) -> list[str]:
    """Stage-0 answers, one per peer, in peer-id order (the same on every peer)."""
    return [consensus(r) for r in sorted(state.select(stage=0, task=task_id), key=lambda r: r.peer_id)]


class MultistageMathData(DataManager):
    """Questions from ``source`` (default: Reasoning Gym's arithmetic sets); prompts per stage."""

    def __init__(self, source: DataManager | None = None, seed: int = 0, tasks_per_round: int = 2) -> None:
        self.source = source or ReasoningGymData(MATH_DATASETS, tasks_per_round=tasks_per_round, seed=seed)

    def round_tasks(self, round: int) -> list[Task]:
        return self.source.round_tasks(round)

    def eval_tasks(self) -> list[Task]:
        return self.source.eval_tasks()

    def stage_inputs(self, state: GameState, stage: int) -> list[Task]:
        if stage == 0:
            return list(state.tasks.values())
        out = []
        for task in state.tasks.values():
            listing = "\n".join(f"Student #{k}: {a}" for k, a in enumerate(students(state, task.id), 1))
            if stage == 1:
                ask = 'Which student answered correctly? Reply with "Choice: Student #k".'
                out.append(task.with_prompt(f"{task.prompt}\n\nAnswers from the swarm:\n{listing}\n\n{ask}"))
            elif stage == 2:
                votes = Counter(m.group(1) for r in state.select(stage=1, task=task.id) for c in r.completions for m in _CHOICE.finditer(c))
                critique = ", ".join(f"Student #{k}: {n} votes" for k, n in votes.most_common()) or "no votes"
                ask = "Considering the answers and the votes, give your final answer in <answer></answer> tags."
                out.append(task.with_prompt(f"{task.prompt}\n\nAnswers from the swarm:\n{listing}\n\nThe swarm's votes: {critique}\n\n{ask}"))
            else:
                raise ValueError(f"multistage_math has stages 0-2, not {stage}")
        return out


class MultistageReward(RewardManager):
    """Stage 0 and 2: accuracy of the answer. Stage 1: accuracy of the chosen student's answer,
    read from the prompt the rollout answered (0 for no or an out-of-range choice)."""

    def __init__(self, stage_weights: Sequence[float] = (1.0, 1.0, 1.0)) -> None:
        self.weights = list(stage_weights)

    def score(self, task: Task, rollout: Rollout) -> list[float]:
        weight = self.weights[rollout.stage] if rollout.stage < len(self.weights) else 1.0
        if rollout.stage != 1:
            return [weight * accuracy(task, c) for c in rollout.completions]
        listed: Mapping[str, Any] = dict(_STUDENT_LINE.findall(rollout.prompt))
        scores = []
        for completion in rollout.completions:
            choice = _CHOICE.search(completion)
            answer = listed.get(choice.group(1)) if choice else None
            scores.append(weight * accuracy(task, f"<answer>{answer}</answer>") if answer else 0.0)
        return scores
