"""Verifiable rewards: accuracy through Reasoning Gym's scorers, plus an optional format reward.

Scores are computed on this peer from its private task (answer, Reasoning Gym entry) and the
text this peer decoded from the rollout's ids (``rollout.texts``): nothing a sender claims
about its own rollout is read. That text is a stranger's, so it only reaches scorers through
``genrl_swarm.scoring`` (written-here scorers in-process, any other one sandboxed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from genrl_swarm.core import RewardManager, Rollout, StageInput, Task
from genrl_swarm.paradigms.lm.answers import answers_match, extract_for, tagged_answer, well_formatted
from genrl_swarm.scoring import Audit, Scorer
from genrl_swarm.scoring.registry import configure, limits_from
from genrl_swarm.scoring.rg import score_entry


def accuracy(task: Task, completion: str, scorer: Scorer | None = None) -> float:
    """The evaluation metric. Reasoning Gym tasks: exactly Reasoning Gym's own — its extraction
    (the last closed ``<answer>`` block) and its scorer on the dataset as the recipe configured
    it. A plug-in ``scorer(answer, gold)`` or, for other tasks, numeric/string equality get the
    lenient extraction (``extract_for``)."""
    entry: dict[str, Any] | None = task.metadata.get("entry")
    if scorer is None and entry is not None:
        return score_entry(task.metadata["dataset"], tagged_answer(completion), entry, task.metadata.get("config", {}))
    return lenient_accuracy(task, completion, scorer)


def exact_accuracy(task: Task, completion: str) -> float:
    """1 when Reasoning Gym's extraction of ``completion`` (the last closed ``<answer>`` block,
    stripped: ``tagged_answer``) is exactly the task's answer string, else 0: Reasoning Gym's
    default rule without its partial credit (``len(oracle)/len(answer)`` for an answer that
    merely contains the oracle, which pays ``<answer>2 - 1</answer>`` 0.2). An echo of the
    question, an untagged number or "the answer is 1" earn nothing (docs/evidence.md)."""
    return 1.0 if task.answer is not None and tagged_answer(completion) == task.answer else 0.0


def lenient_accuracy(task: Task, completion: str, scorer: Scorer | None = None) -> float:
    """Credit for the answer wherever a small model leaves it (an unclosed tag, ``\\boxed{}``,
    "the answer is", the last number): a shaping term for training, never the evaluation metric."""
    answer = extract_for(task.answer, completion)
    if scorer is not None:
        return scorer(answer, task.answer)
    entry: dict[str, Any] | None = task.metadata.get("entry")
    if entry is not None:
        return score_entry(task.metadata["dataset"], answer, entry, task.metadata.get("config", {}))
    return 1.0 if task.answer is not None and answers_match(answer, task.answer) else 0.0


class ReasoningReward(RewardManager):
    """``accuracy_weight`` x accuracy (the evaluation metric) + ``lenient_weight`` x lenient
    accuracy (a shaping term) + ``format_weight`` x (exactly one ``<answer>`` block).

    ``scorer``: a plug-in accuracy function ``package.module:function(answer, gold) -> float``.
    It runs in the scorer sandbox unless ``scorer_audited`` says you wrote and audited it for
    text from strangers (then in-process, faster). ``sandbox``: the sandbox's limits
    (``ScorerLimits`` fields: cpu_seconds, wall_seconds, memory_mb, file_mb, workers, unconfined);
    where the kernel cannot build the sandbox, building this refuses to go on unless
    ``unconfined`` is set.

    ``exact``: a task without a Reasoning Gym entry (digits) and without a plug-in ``scorer`` is
    scored by ``exact_accuracy`` instead of the lenient extraction ``accuracy`` falls back to."""

    def __init__(
        self,
        accuracy_weight: float = 1.0,
        format_weight: float = 0.0,
        lenient_weight: float = 0.0,
        scorer: str | None = None,
        scorer_audited: bool = False,
        sandbox: Mapping[str, Any] | None = None,
        exact: bool = False,
    ) -> None:
        self.exact = exact
        self.accuracy_weight, self.format_weight, self.lenient_weight = accuracy_weight, format_weight, lenient_weight
        self.scorer = Scorer(scorer, Audit.OURS if scorer_audited else Audit.SANDBOXED) if scorer else None
        configure(limits_from(sandbox or {}), (scorer.partition(":")[0],) if scorer and not scorer_audited else ())

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        return [self._reward(task, text) for text in rollout.texts]

    def _reward(self, task: Task, text: str) -> float:
        exact = self.exact and self.scorer is None and task.metadata.get("entry") is None
        hit = exact_accuracy(task, text) if exact else accuracy(task, text, self.scorer)
        reward = self.accuracy_weight * hit + self.format_weight * float(well_formatted(text))
        return reward + (self.lenient_weight * lenient_accuracy(task, text, self.scorer) if self.lenient_weight else 0.0)
