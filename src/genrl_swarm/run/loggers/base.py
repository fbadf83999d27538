"""The one interface every metrics logger has, and what each is told when it opens.

Why one interface: ``run.loggers`` picks any mix of JSONL, TensorBoard, trackio and W&B, and
the metrics hook (``run.metrics.MetricsLogger``) hands each the same row once a round; a
tracker is one small module that knows its own library and nothing of the game.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class LoggerContext:
    """Where and for whom a logger writes: one peer of one run."""

    directory: Path  # the peer's folder, <run dir>/<peer id>
    peer: str
    run: str  # the run directory's name: a tracker's group, so a swarm's peers sit together
    game: str  # the recipe's name: a tracker's project, so games are not mixed
    start_round: int = 0  # > 0 on --resume: rows from here on are played again
    recipe: Mapping[str, Any] = field(default_factory=dict)  # a tracker run's config


class Logger(Protocol):
    """``log`` is called once a round with the whole row (round, peer, winners and the scalars);
    ``close`` once, when the peer stops."""

    def log(self, row: Mapping[str, Any], step: int) -> None: ...

    def close(self) -> None: ...


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The row's numbers a tracker plots (not the round, which is the step; not the winners' ids)."""
    return {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and k != "round"}
