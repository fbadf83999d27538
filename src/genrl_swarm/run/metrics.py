"""Per-round metrics of one peer: a JSONL file (the record) and TensorBoard (the view)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from genrl_swarm.core.game import GameManager
from genrl_swarm.core.types import RoundResult


def flatten(result: RoundResult) -> dict[str, float]:
    """Scalars of a round: rewards per peer, own reward, swarm mean, and the loop's metrics."""
    own = result.rewards.get(result.peer_id, 0.0)
    swarm = sum(result.rewards.values()) / len(result.rewards) if result.rewards else 0.0
    out = {"reward/own": own, "reward/swarm_mean": swarm}
    out |= {f"reward/peer/{p}": v for p, v in result.rewards.items()}
    return out | result.metrics


class MetricsLogger:
    """An ``after_round`` hook; one per peer, in ``<run dir>/<peer id>/``.

    Rows of ``start_round`` and later (played after the checkpoint a resumed run starts from, or
    by an earlier run in the same directory) are removed when the logger starts, so every round
    appears once, and a round the resumed peer then skips (catch-up) leaves no row behind;
    TensorBoard purges from ``start_round`` too.
    """

    def __init__(self, directory: Path, tensorboard: bool = True, start_round: int = 0) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "metrics.jsonl"
        if self.path.exists():
            kept = [row for row in read_metrics(self.path) if row.get("round", -1) < start_round]
            self.path.write_text("".join(json.dumps(row) + "\n" for row in kept))
        self._writer: Any = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # heavy import, only when asked

            self._writer = SummaryWriter(str(directory / "tb"), purge_step=start_round)

    def __call__(self, manager: GameManager, result: RoundResult) -> None:
        scalars = flatten(result)
        scalars["reward/cumulative"], scalars["wins"] = manager.coordinator.tally(result.peer_id)
        scalars |= {f"dropped/{p}": float(n) for p, n in result.dropped.items()}
        record = {"round": result.round, "peer": result.peer_id, "winners": list(result.winners), **scalars}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self._writer is not None:
            for key, value in scalars.items():
                self._writer.add_scalar(key, value, result.round)
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
