"""A curriculum: task levels in order, and the rule that promotes a learner to the next one.

Why: at 135M parameters a multi-step question with a 0/1 reward gives no signal (no episode of
a group succeeds, so every advantage is zero); a level the model can already solve now and then
does. The levels are ordinary task names, so the level an episode was played at is public
(in its task spec) and every receiver rebuilds and scores the same task itself. Promotion is a
local decision on this peer's own moving success rate; it changes only which tasks it asks for.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The calculator's levels, easiest first (``calculator`` is today's multi-step task).
CALCULATOR_LEVELS: tuple[str, ...] = ("calculator-1", "calculator-2", "calculator")


@dataclass(frozen=True)
class Promotion:
    """Promote when the success rate over the last ``window`` episodes of a level is at least
    ``threshold`` (a full window is required, so a lucky first episode promotes no one)."""

    window: int = 16
    threshold: float = 0.5

    def __post_init__(self) -> None:
        if self.window < 1 or not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"promotion: window must be >= 1 and threshold in (0, 1], got {self.window}, {self.threshold}")


@dataclass(frozen=True)
class CurriculumConfig:
    """A curriculum as a recipe writes it (``data.curriculum``): levels, easiest first, and the
    promotion rule's window and threshold."""

    levels: tuple[str, ...] = CALCULATOR_LEVELS
    window: int = 16
    threshold: float = 0.5

    def __post_init__(self) -> None:
        if not self.levels or len(set(self.levels)) != len(self.levels):
            raise ValueError(f"levels: at least one level, each once, got {list(self.levels)}")
        Promotion(self.window, self.threshold)  # its own checks

    def build(self) -> Curriculum:
        return Curriculum(self.levels, Promotion(self.window, self.threshold))


@dataclass
class Curriculum:
    """Which level this learner plays now, from the outcomes it recorded at that level."""

    levels: tuple[str, ...] = CALCULATOR_LEVELS
    rule: Promotion = field(default_factory=Promotion)
    at: int = 0
    recent: deque[bool] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if not self.levels or not 0 <= self.at < len(self.levels):
            raise ValueError(f"curriculum: level index {self.at} outside {len(self.levels)} level(s)")

    @property
    def level(self) -> str:
        return self.levels[self.at]

    @property
    def success_rate(self) -> float:
        return sum(self.recent) / len(self.recent) if self.recent else 0.0

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps: the level and the outcomes counted at it."""
        return {"level": self.level, "recent": list(self.recent)}

    def restore(self, state: Any) -> None:
        """Take back ``state()``; raises ValueError (one line) on anything else."""
        if not isinstance(state, Mapping) or not isinstance(state.get("level"), str):
            raise ValueError(f"curriculum state must be a mapping with a 'level', got {state!r:.80}")
        recent = state.get("recent", [])
        if not isinstance(recent, list) or not all(isinstance(x, bool) for x in recent):
            raise ValueError(f"curriculum state: 'recent' must be a list of true/false, got {recent!r:.80}")
        if state["level"] not in self.levels:
            raise ValueError(f"curriculum level {state['level']!r} is not one of the levels {list(self.levels)}")
        self.at = self.levels.index(state["level"])
        self.recent = deque(recent[-self.rule.window :])

    def record(self, task: str, success: bool) -> bool:
        """Count one episode's outcome (only episodes of the current level count); True when it
        promoted (the window restarts empty at the new level)."""
        if task != self.level:
            return False
        self.recent.append(success)
        while len(self.recent) > self.rule.window:
            self.recent.popleft()
        if len(self.recent) < self.rule.window or self.success_rate < self.rule.threshold or self.at + 1 >= len(self.levels):
            return False
        self.at += 1
        self.recent.clear()
        return True
