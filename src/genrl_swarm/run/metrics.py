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
    """An ``after_round`` hook; one per peer, in ``<run dir>/<peer id>/``."""

    def __init__(self, directory: Path, tensorboard: bool = True) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "metrics.jsonl"
        self._writer: Any = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # heavy import, only when asked

            self._writer = SummaryWriter(str(directory / "tb"))

    def __call__(self, manager: GameManager, result: RoundResult) -> None:
        scalars = flatten(result)
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
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
