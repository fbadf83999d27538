"""Per-round metrics of one peer: a JSONL file (the record) and TensorBoard (the view)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from genrl_swarm.core.game import GameManager
from genrl_swarm.core.types import RoundResult
from genrl_swarm.run.checkpoint import write_atomic
from genrl_swarm.run.storage import writing
from genrl_swarm.run.tensorboard import ScalarWriter

log = logging.getLogger(__name__)


def flatten(result: RoundResult) -> dict[str, float]:
    """Scalars of a round: rewards per peer, own reward, swarm mean, and the loop's metrics."""
    own = result.rewards.get(result.peer_id, 0.0)
    swarm = sum(result.rewards.values()) / len(result.rewards) if result.rewards else 0.0
    out = {"reward/own": own, "reward/swarm_mean": swarm}
    out |= {f"reward/peer/{p}": v for p, v in result.rewards.items()}
    return out | result.metrics


def metrics_row(manager: GameManager, result: RoundResult) -> dict[str, Any]:
    """The ``metrics.jsonl`` row of a round: its scalars, the peer's tally, its drops per sender."""
    scalars = flatten(result)
    scalars["reward/cumulative"], scalars["wins"] = manager.coordinator.tally(result.peer_id)
    scalars |= {f"dropped/{p}": float(n) for p, n in result.dropped.items()}
    return {"round": result.round, "peer": result.peer_id, "winners": list(result.winners), **scalars}


class MetricsLogger:
    """An ``after_round`` hook; one per peer, in ``<run dir>/<peer id>/``.

    Rows of ``start_round`` and later (played after the checkpoint a resumed run starts from, or
    by an earlier run in the same directory) are removed when the logger starts, and logged, so
    every round appears once, and a round the resumed peer then skips (catch-up) leaves no row
    behind; TensorBoard purges from ``start_round`` too. ``carried`` is the row the checkpoint
    holds for its own round (``start_round - 1``): written again if the process died after the
    checkpoint and before that row, so a kill at any instant loses no row.
    """

    def __init__(self, directory: Path, tensorboard: bool = True, start_round: int = 0, carried: dict[str, Any] | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "metrics.jsonl"
        self._writer: Any = None
        if tensorboard:
            self._writer = ScalarWriter(directory / "tb", purge_step=start_round)
        rows = read_metrics(self.path) if self.path.exists() else []
        kept = [row for row in rows if row.get("round", -1) < start_round]
        if len(kept) < len(rows):
            dropped = sorted({row.get("round", -1) for row in rows} - {row["round"] for row in kept})
            log.info(
                "%s: rounds %d-%d were played after the checkpoint this run resumes from: their rows are removed and the rounds played again",
                self.path,
                dropped[0],
                dropped[-1],
            )
        if self.path.exists():  # also drops a row cut short by a kill; renamed into place, so a kill now loses nothing
            write_atomic(self.path, "".join(json.dumps(row) + "\n" for row in kept))
        if carried is not None and carried.get("round") == start_round - 1 and not any(row.get("round") == carried["round"] for row in kept):
            log.info("%s: the row of round %d was lost (stopped after its checkpoint): written from the checkpoint", self.path, carried["round"])
            self._write(carried)

    def __call__(self, manager: GameManager, result: RoundResult) -> None:
        self._write(metrics_row(manager, result))

    def _write(self, record: dict[str, Any]) -> None:
        with writing(self.path), self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self._writer is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "round":
                    self._writer.add_scalar(key, value, record["round"])
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl; a line cut short by a crash mid-write is skipped."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows
