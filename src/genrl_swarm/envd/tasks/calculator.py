"""Calculator: evaluate an integer expression with a ``calculate`` tool, answer the number."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from genrl_swarm.envd.tasks.arith import MAX_CHARS, evaluate, show
from genrl_swarm.envd.schema import Param, Tool
from genrl_swarm.envd.tasks.base import Outcome, Setup, Task, same_answer


class Calculator(Task):
    name = "calculator"
    summary = "arithmetic with a calculate tool; reward 1 for the exact value"
    tools = (
        Tool(
            "calculate",
            "Evaluate an arithmetic expression exactly: numbers, + - * / % ^ and parentheses.",
            {"expression": Param("string", "the expression, e.g. (12 + 7) * 3", max_length=MAX_CHARS)},
        ),
    )

    def setup(self, seed: int, scratch: Path | None) -> Setup:
        rng = self.rng(seed, self.name)
        terms = [str(rng.randint(2, 999)) for _ in range(rng.randint(3, 5))]
        ops = [rng.choice("+-*") for _ in terms[1:]]
        at = rng.randrange(len(ops))  # one parenthesised pair, so precedence matters
        terms[at], terms[at + 1] = f"({terms[at]}", f"{terms[at + 1]})"
        expression = terms[0] + "".join(f" {op} {t}" for op, t in zip(ops, terms[1:]))
        prompt = f"What is {expression}? Use the calculate tool, then give the number as <answer>...</answer>."
        return Setup(prompt, show(evaluate(expression)))

    def call(self, tool: str, arguments: dict[str, Any], state: Any, scratch: Path | None) -> Outcome:
        return Outcome(show(evaluate(arguments["expression"])))

    def reward(self, answer: str, truth: str, state: Any) -> float:
        return float(same_answer(answer, truth))
