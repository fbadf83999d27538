"""A small shaped reward for the output format, kept apart from task success.

Why: a 135M model almost never writes a parsable ``<tool_call>`` or ``<answer>``, so a 0/1
success reward gives its groups no variance and GRPO no gradient. A little credit for getting
the format right gives signal early. The terms are computed by the receiver from the model
turns as *it* decodes them (local truth, like the success reward), and each is reported on its
own: ``Scored.success`` is the environment's reward alone and never includes them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from genrl_swarm.envd.parsing import parse_action
from genrl_swarm.envd.types import Answer, ToolCall


@dataclass(frozen=True)
class Shaping:
    """Weights of the format terms in the training reward (0 and 0: success alone)."""

    call: float = 0.0
    answer: float = 0.0

    def __post_init__(self) -> None:
        if min(self.call, self.answer) < 0.0 or self.call + self.answer >= 1.0:
            raise ValueError(f"shaping weights must be >= 0 and sum below 1 (a success must outweigh the format), got {self}")


@dataclass(frozen=True)
class Scored:
    """One episode as a receiver scored it: success (the environment's reward) and the format
    terms in [0, 1], each reported apart."""

    kind: str
    success: float
    call: float  # 1 when some model turn is a parsable call of one of the task's tools
    answer: float  # 1 when some model turn is a well-formed <answer>
    peer: str = ""  # who played the episode
    task_id: str = ""  # which task of the round it answered

    def reward(self, weights: Shaping) -> float:
        """What the learner trains on: success plus the weighted format terms."""
        return self.success + weights.call * self.call + weights.answer * self.answer


def format_terms(replies: Iterable[str], tools: Iterable[str]) -> tuple[float, float]:
    """(parsable call, well-formed answer) of an episode's model turns, each 0 or 1."""
    names = set(tools)
    actions = [parse_action(text) for text in replies]
    call = any(isinstance(a, ToolCall) and a.name in names for a in actions)
    answer = any(isinstance(a, Answer) for a in actions)
    return float(call), float(answer)
