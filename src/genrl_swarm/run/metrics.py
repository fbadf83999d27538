"""Per-round metrics of one peer: the row (what a round is worth recording) and the hook that
hands it to every logger ``run.loggers`` names (JSONL always, TensorBoard, trackio, W&B).

A row is the round's scalars: rewards (the round's and each stage's, own and the swarm's), the
loop's metrics, the peer's tally, its drops per sender and this process's memory. An
``after_round`` hook placed before the checkpoint may add its own scalars to ``result.metrics``
(the demo's held-out accuracy does): the checkpoint, metrics.jsonl and every tracker then get them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from genrl_swarm.config import LoggerName, RecipeError
from genrl_swarm.core.game import GameManager
from genrl_swarm.core.types import RoundResult
from genrl_swarm.run.loggers import chosen, open_logger
from genrl_swarm.run.loggers.base import Logger, LoggerContext
from genrl_swarm.run.loggers.jsonl import METRICS_FILE, resume_rows
from genrl_swarm.run.loggers.jsonl import read_metrics as read_metrics  # where every reader of the file imports it
from genrl_swarm.run.memory import memory_metrics


def _swarm_mean(means: Mapping[str, float]) -> float:
    """The mean of every peer's mean reward: one peer, one vote, however many rollouts it sent."""
    return sum(means.values()) / len(means) if means else 0.0


def flatten(result: RoundResult) -> dict[str, float]:
    """Scalars of a round: own reward (as this peer scored itself) and the swarm mean, the same two
    for each stage (``_s<stage>``, the suffix of the loop's per-stage metrics; own only for a stage
    this peer played), rewards per peer, the loop's metrics."""
    me = result.peer_id
    out = {"reward/own": result.rewards.get(me, 0.0), "reward/swarm_mean": _swarm_mean(result.rewards)}
    for stage, means in sorted(result.stage_rewards.items()):
        if me in means:
            out[f"reward/own_s{stage}"] = means[me]
        out[f"reward/swarm_mean_s{stage}"] = _swarm_mean(means)
    out |= {f"reward/peer/{p}": v for p, v in result.rewards.items()}
    return out | result.metrics


def metrics_row(manager: GameManager, result: RoundResult) -> dict[str, Any]:
    """The ``metrics.jsonl`` row of a round: its scalars, the peer's tally, its drops per sender, its process's memory."""
    scalars = flatten(result)
    scalars["reward/cumulative"], scalars["wins"] = manager.coordinator.tally(result.peer_id)
    scalars |= {f"dropped/{p}": float(n) for p, n in result.dropped.items()}
    scalars |= memory_metrics()
    return {"round": result.round, "peer": result.peer_id, "winners": list(result.winners), **scalars}


class MetricsLogger:
    """An ``after_round`` hook; one per peer, writing into ``<run dir>/<peer id>/``.

    It opens ``chosen(loggers, tensorboard)`` (metrics.jsonl first) and gives each the row of
    every round. On ``--resume`` metrics.jsonl first keeps only the rounds before ``start_round``
    (``jsonl.resume_rows``), and ``carried``, the row the checkpoint holds for its own round, is
    written again to every logger if the process died after the checkpoint and before that row,
    so a kill at any instant loses no row.
    """

    def __init__(
        self,
        directory: Path,
        loggers: Sequence[LoggerName] = ("jsonl", "tensorboard"),
        *,
        tensorboard: bool = True,
        start_round: int = 0,
        carried: dict[str, Any] | None = None,
        game: str = "game",
        recipe: Mapping[str, Any] | None = None,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / METRICS_FILE
        lost = resume_rows(self.path, start_round, carried)
        context = LoggerContext(directory, peer=directory.name, run=directory.parent.name, game=game, start_round=start_round, recipe=recipe or {})
        self.loggers: list[Logger] = []
        try:
            for name in chosen(loggers, tensorboard):
                self.loggers.append(_open(name, context))
        except BaseException:
            self.close()
            raise
        if lost is not None:
            self._write(lost)

    def __call__(self, manager: GameManager, result: RoundResult) -> None:
        self._write(metrics_row(manager, result))

    def _write(self, row: dict[str, Any]) -> None:
        for logger in self.loggers:
            logger.log(row, int(row["round"]))

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()
        self.loggers = []


def _open(name: LoggerName, context: LoggerContext) -> Logger:
    """One logger; a tracker that cannot start (W&B online without a key, ...) is the recipe's
    to fix: one line naming it. A disk error stays a disk error (``run.failures``)."""
    try:
        return open_logger(name, context)
    except OSError:
        raise
    except Exception as e:  # noqa: BLE001 - a third-party tracker's own error type, re-raised as one line
        text = " ".join(str(e).split()) or type(e).__name__
        raise RecipeError(f"run.loggers: {name} did not start: {text}") from e
