"""What a task is: tools, a seeded setup, tool code, and a verifiable reward.

The three methods run in different places on purpose. ``setup`` and ``call`` are task code
that a model drives (its arguments, its queries): they run only in a sandboxed child process of
an environment worker (``envd.sandbox``), never in the trainer. ``reward`` is a pure function
of the ground truth and the final state, cheap and model-independent; the worker runs it.
Tool code is a pure function of (arguments, state, scratch dir): state travels with each call,
so a sandbox child that is killed loses nothing but the call it was running.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from genrl_swarm.envd.schema import Tool


class ToolFailure(Exception):
    """A call that failed in a way the model can fix (division by zero, an SQL error): its message
    is shown to the model and the episode goes on. Any other exception in tool code is a bug or
    a sandbox violation and ends the session."""


class Setup(msgspec.Struct, frozen=True):
    """A task instance built from a seed: the question, the private ground truth, the first state."""

    prompt: str
    truth: str
    state: Any = None


class Outcome(msgspec.Struct, frozen=True):
    """What one tool call returned to the model, and the task state after it."""

    content: str
    state: Any = None


class Task(ABC):
    """A kind of episode. Subclasses declare ``name``, ``tools`` and implement the three methods."""

    name: ClassVar[str]
    summary: ClassVar[str]
    tools: ClassVar[tuple[Tool, ...]]
    #: Whether setup/call use the session's scratch directory (created only for these tasks).
    needs_scratch: ClassVar[bool] = False

    @abstractmethod
    def setup(self, seed: int, scratch: Path | None) -> Setup:
        """The instance of ``seed``: same seed, same question and truth, on every machine."""

    @abstractmethod
    def call(self, tool: str, arguments: dict[str, Any], state: Any, scratch: Path | None) -> Outcome:
        """Run one (schema-checked) tool call; raise ToolFailure for a mistake the model can fix."""

    @abstractmethod
    def reward(self, answer: str, truth: str, state: Any) -> float:
        """The episode's reward in [0, 1] once the model answered ``answer``."""

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    @staticmethod
    def rng(seed: int, salt: str) -> random.Random:
        """A generator private to (task, seed): string seeding is stable across processes."""
        return random.Random(f"{salt}:{seed}")


def as_number(text: str) -> Fraction | None:
    """``text`` as an exact number ("1,234", "-7.5", "$12"), or None when it is not one."""
    cleaned = text.strip().replace(",", "").replace("$", "").rstrip(".").strip()
    if not cleaned or len(cleaned) > 64:
        return None
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def same_answer(answer: str, truth: str) -> bool:
    """Numbers compare by value, text case- and space-insensitively."""
    a, t = as_number(answer), as_number(truth)
    if a is not None and t is not None:
        return a == t
    return " ".join(answer.lower().split()).rstrip(".") == " ".join(truth.lower().split())
