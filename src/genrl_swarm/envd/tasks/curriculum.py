"""A curriculum: task levels in order, and the rule that promotes a learner to the next one.

Why: at 135M parameters a multi-step question with a 0/1 reward gives no signal (no episode of
a group succeeds, so every advantage is zero); a level the model can already solve now and then
does. The levels are ordinary task names, so the level an episode was played at is public
(in its task spec) and every receiver rebuilds and scores the same task itself. Promotion is a
local decision on this peer's own moving success rate; it changes only which tasks it asks for.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

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
