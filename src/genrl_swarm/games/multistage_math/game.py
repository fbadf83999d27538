"""Multistage math: answer, judge the swarm's answers, revise.

Stage 0: each peer answers the question. Stage 1: it sees every peer's answer as
"Student #k: ..." and picks the best ("Choice: Student #k"). Stage 2: it sees the answers
and the swarm's choices and gives a final answer. Each stage has its own reward, recomputed
locally from the question's ground truth.

This is the template for a text game. The listing of students and the votes are built by
*this* peer from the completions it accepted (text it decoded itself) and kept in the stage
input's context; a stage-1 pick is scored against that listing, never against a prompt a
sender claims to have seen. The loop builds later stages from at most ``game.max_sources``
senders' payloads, named on the wire, so a receiver rebuilds a sender's listing from the same
payloads (``GameState.view``); a vote is read against the listing its voter answered, by answer
text, so voters that saw listings in another order still count for the same answers.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from genrl_swarm.core import DataManager, GameState, RewardManager, Rollout, StageInput, Task
from genrl_swarm.data.reasoning_gym import ReasoningGymData
from genrl_swarm.paradigms.lm.answers import extract_answer
from genrl_swarm.rewards.reasoning import accuracy

MATH_DATASETS = ("basic_arithmetic", "chain_sum", "decimal_arithmetic", "fraction_simplification", "simple_equations")
_CHOICE = re.compile(r"Choice:\s*Student\s*#\s*(\d+)", re.IGNORECASE)


def consensus(rollout: Rollout[Any]) -> str:
    """A peer's answer: the most common extracted answer among its completions."""
    answers = [a for a in (extract_answer(c) for c in rollout.texts) if a]
    return Counter(answers).most_common(1)[0][0].replace("\n", " ") if answers else "(no answer)"


def students(state: GameState, task_id: str) -> list[str]:
    """Stage-0 answers, one per peer, in peer-id order (the same on every peer)."""
    return [consensus(r) for r in sorted(state.select(stage=0, task=task_id), key=lambda r: r.peer_id)]


def vote_in(state: GameState, rollout: Rollout[Any], answers: Sequence[str]) -> str | None:
    """A stage-1 vote as a number in ``answers``: the pick read in the listing its voter answered
    (``state.input_for``), found in ``answers`` by its text; None if that answer is not listed."""
    theirs: Sequence[str] = state.input_for(rollout).context["students"]
    pick = vote(rollout, len(theirs))
    if pick is None or theirs[int(pick) - 1] not in answers:
        return None
    return str(list(answers).index(theirs[int(pick) - 1]) + 1)


def vote(rollout: Rollout[Any], num_students: int) -> str | None:
    """A peer's one vote: the student its completions chose most often (one vote per peer, so
    a peer sending many samples cannot stuff the ballot or bloat the next prompt)."""
    picks = [m.group(1) for c in rollout.texts if (m := _CHOICE.search(c)) and len(m.group(1)) < 6]
    picks = [k for k in picks if 1 <= int(k) <= num_students]
    return Counter(picks).most_common(1)[0][0] if picks else None


class MultistageMathData(DataManager):
    """Questions from ``source`` (default: Reasoning Gym's arithmetic sets); prompts per stage."""

    def __init__(self, source: DataManager | None = None, seed: int = 0, tasks_per_round: int = 2) -> None:
        self.source = source or ReasoningGymData(MATH_DATASETS, tasks_per_round=tasks_per_round, seed=seed)

    def round_tasks(self, round: int) -> list[Task]:
        return self.source.round_tasks(round)

    def eval_tasks(self) -> list[Task]:
        return self.source.eval_tasks()

    def stage_inputs(self, state: GameState, stage: int) -> list[StageInput]:
        if stage == 0:
            return [t.input(0) for t in state.tasks.values()]
        if stage not in (1, 2):
            raise ValueError(f"multistage_math has stages 0-2, not {stage}")
        out = []
        for task in state.tasks.values():
            answers = students(state, task.id)
            listing = "\n".join(f"Student #{k}: {a}" for k, a in enumerate(answers, 1))
            if stage == 1:
                ask = 'Which student answered correctly? Reply with "Choice: Student #k".'
                out.append(task.input(1, f"{task.prompt}\n\nAnswers from the swarm:\n{listing}\n\n{ask}", students=answers))
                continue
            votes = Counter(v for v in (vote_in(state, r, answers) for r in state.select(stage=1, task=task.id)) if v)
            critique = ", ".join(f"Student #{k}: {n} votes" for k, n in votes.most_common()) or "no votes"
            ask = "Considering the answers and the votes, give your final answer in <answer></answer> tags."
            prompt = f"{task.prompt}\n\nAnswers from the swarm:\n{listing}\n\nThe swarm's votes: {critique}\n\n{ask}"
            out.append(task.input(2, prompt, students=answers, votes=dict(votes)))
        return out


class MultistageReward(RewardManager):
    """Stage 0 and 2: accuracy of the answer. Stage 1: accuracy of the chosen student's answer
    in the listing *this peer* built (0 for no or an out-of-range choice)."""

    def __init__(self, stage_weights: Sequence[float] = (1.0, 1.0, 1.0)) -> None:
        self.weights = list(stage_weights)

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        weight = self.weights[input.stage] if input.stage < len(self.weights) else 1.0
        if input.stage != 1:
            return [weight * accuracy(task, c) for c in rollout.texts]
        listed: Sequence[str] = input.context["students"]
        scores = []
        for completion in rollout.texts:
            choice = _CHOICE.search(completion)
            k = int(choice.group(1)) if choice and len(choice.group(1)) < 6 else 0
            answer = listed[k - 1] if 1 <= k <= len(listed) else None
            scores.append(weight * accuracy(task, f"<answer>{answer}</answer>") if answer else 0.0)
        return scores
