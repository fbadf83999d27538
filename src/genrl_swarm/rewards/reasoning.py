"""Verifiable rewards: accuracy through Reasoning Gym's scorers, plus an optional format reward.

Scores are computed on this peer from its private task (answer, Reasoning Gym entry) and the
text this peer decoded from the rollout's ids (``rollout.texts``): nothing a sender claims
about its own rollout is read. That text is a stranger's, so it only reaches scorers through
``genrl_swarm.scoring`` (written-here scorers in-process, any other one sandboxed).
"""

from __future__ import annotations

import enum
import re
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


_QUESTION = re.compile(r"What is (.+)\?\s*$")
_STATEMENT = re.compile(r"(?:(?P<expr>[^=]+?)\s*=\s*)?(?P<value>-?\d+)\.?")


def stated_answer(task: Task, completion: str) -> str | None:
    """The answer the completion's first non-empty line states, when that line is nothing but
    the answer (``28``, ``28.``) or the question's own expression and the answer (``4 * 7 = 28``);
    else None. For "What is X?" tasks (digits) whose model writes no ``<answer>`` tag at all."""
    line = next((x.strip() for x in completion.splitlines() if x.strip()), "")
    m = _STATEMENT.fullmatch(line)
    if m is None:
        return None
    if m["expr"] is not None:
        q = _QUESTION.search(task.prompt)
        if q is None or "".join(m["expr"].split()) != "".join(q[1].split()):
            return None
    return m["value"]


def stated_accuracy(task: Task, completion: str) -> float:
    """1 when the completion's first line states the task's answer and nothing else (``stated_answer``),
    else 0. An exact metric a 135M model's own answer form can reach (it writes ``4 * 7 = 28``, never a
    tag: docs/evidence.md, amendment 2): an echo of the question, "the answer is 28", a wrong
    expression or anything after the number on that line earn nothing."""
    return 1.0 if task.answer is not None and stated_answer(task, completion) == task.answer else 0.0


class AnswerRule(enum.Enum):
    """How accuracy reads a task without a Reasoning Gym entry or a plug-in scorer."""

    LENIENT = "lenient"  # extract_for: wherever a small model leaves it (the default)
    EXACT = "exact"  # exact_accuracy: the last closed <answer> block, exactly
    STATED = "stated"  # stated_accuracy: the first line states the answer and nothing else


_OWN_RULES = {AnswerRule.EXACT: exact_accuracy, AnswerRule.STATED: stated_accuracy}  # LENIENT: ``accuracy``'s fallback


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

    ``answer_rule``: how a task without a Reasoning Gym entry (digits) and without a plug-in
    ``scorer`` is scored (``AnswerRule``: lenient, exact or stated; a recipe names its value)."""

    def __init__(
        self,
        accuracy_weight: float = 1.0,
        format_weight: float = 0.0,
        lenient_weight: float = 0.0,
        scorer: str | None = None,
        scorer_audited: bool = False,
        sandbox: Mapping[str, Any] | None = None,
        answer_rule: AnswerRule | str = AnswerRule.LENIENT,
    ) -> None:
        try:
            self.answer_rule = AnswerRule(answer_rule)
        except ValueError:
            raise ValueError(f"reward.answer_rule: {answer_rule!r} is not one of {', '.join(r.value for r in AnswerRule)}") from None
        self.accuracy_weight, self.format_weight, self.lenient_weight = accuracy_weight, format_weight, lenient_weight
        self.scorer = Scorer(scorer, Audit.OURS if scorer_audited else Audit.SANDBOXED) if scorer else None
        configure(limits_from(sandbox or {}), (scorer.partition(":")[0],) if scorer and not scorer_audited else ())

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        return [self._reward(task, text) for text in rollout.texts]

    def _reward(self, task: Task, text: str) -> float:
        own = self.scorer is None and task.metadata.get("entry") is None
        rule = _OWN_RULES.get(self.answer_rule) if own else None
        hit = rule(task, text) if rule else accuracy(task, text, self.scorer)
        reward = self.accuracy_weight * hit + self.format_weight * float(well_formatted(text))
        return reward + (self.lenient_weight * lenient_accuracy(task, text, self.scorer) if self.lenient_weight else 0.0)
