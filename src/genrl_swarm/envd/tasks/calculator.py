"""Calculator: evaluate an integer expression with a ``calculate`` tool, answer the number.

Three levels share the tool and the reward and differ in the question's shape, so a small model
meets the call format on a question it can solve before today's multi-step ones: level 1 is one
binary operation on two-digit numbers, level 2 three terms without parentheses, and
``calculator`` itself (the last level) three to five terms with one parenthesised pair. The
level is the task's name, so it is in every task spec and a receiver rebuilds the same question.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from genrl_swarm.envd.schema import Param, Tool
from genrl_swarm.envd.tasks.arith import MAX_CHARS, evaluate, show
from genrl_swarm.envd.tasks.base import Outcome, Setup, Task, same_answer


@dataclass(frozen=True)
class Shape:
    """What a level's questions look like: how many terms, how large, one bracketed pair or not."""

    terms: tuple[int, int]
    top: int
    parens: bool


class Calculator(Task):
    name = "calculator"
    summary = "arithmetic with a calculate tool; reward 1 for the exact value"
    shape: ClassVar[Shape] = Shape((3, 5), 999, True)
    tools = (
        Tool(
            "calculate",
            "Evaluate an arithmetic expression exactly: numbers, + - * / % ^ and parentheses.",
            {"expression": Param("string", "the expression, e.g. (12 + 7) * 3", max_length=MAX_CHARS)},
        ),
    )

    def setup(self, seed: int, scratch: Path | None) -> Setup:
        rng, shape = self.rng(seed, self.name), self.shape
        terms = [str(rng.randint(2, shape.top)) for _ in range(rng.randint(*shape.terms))]
        ops = [rng.choice("+-*") for _ in terms[1:]]
        if shape.parens:
            at = rng.randrange(len(ops))  # one parenthesised pair, so precedence matters
            terms[at], terms[at + 1] = f"({terms[at]}", f"{terms[at + 1]})"
        expression = terms[0] + "".join(f" {op} {t}" for op, t in zip(ops, terms[1:]))
        prompt = f"What is {expression}? Use the calculate tool, then give the number as <answer>...</answer>."
        return Setup(prompt, show(evaluate(expression)))

    def call(self, tool: str, arguments: dict[str, Any], state: Any, scratch: Path | None) -> Outcome:
        return Outcome(show(evaluate(arguments["expression"])))

    def reward(self, answer: str, truth: str, state: Any) -> float:
        return float(same_answer(answer, truth))


class CalculatorOne(Calculator):
    """Level 1: one binary operation, e.g. ``What is 47 * 12?``."""

    name = "calculator-1"
    summary = "level 1 of calculator: one binary operation on two-digit numbers"
    shape = Shape((2, 2), 99, False)


class CalculatorTwo(Calculator):
    """Level 2: two operations (precedence, no brackets)."""

    name = "calculator-2"
    summary = "level 2 of calculator: three terms, no parentheses"
    shape = Shape((3, 3), 999, False)
