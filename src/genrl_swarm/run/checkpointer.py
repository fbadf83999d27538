"""The checkpoint hooks of one peer: every ``every`` rounds, after the last round, and on a stop.

A checkpoint also carries its round's metrics row. The checkpoint hook runs before the metrics
hook (a peer killed between the two then has the round's training saved, not lost), so a kill
between them would lose that row for good: ``--resume`` starts one round later. The carried row
is written again when the resumed run finds it missing (``MetricsLogger(carried=...)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genrl_swarm.core.game import GameManager
from genrl_swarm.core.types import RoundResult
from genrl_swarm.run.checkpoint import drop_part_from_older, save_checkpoint
from genrl_swarm.run.metrics import metrics_row

ROW_KEY = "row"  # the round's metrics row, in state.json
DATA_KEY = "data"  # what the data manager learned while playing (DataManager.state), in state.json
LEARNER = "learner"  # the part holding the learner's state (optimizer, scheduler, counters, RNG)


@dataclass
class Checkpointer:
    """``after_round`` hook (``__call__``) and ``after_game`` hook (``on_stop``)."""

    directory: Path
    every: int
    keep: int
    max_rounds: int
    learner_in_latest_only: bool = False  # older checkpoints drop learner/ (see RunConfig)
    _last: dict[str, Any] | None = field(default=None, init=False)  # the row of the latest round played
    _saved: int = field(default=-1, init=False)  # the round of the latest checkpoint written

    def __call__(self, manager: GameManager, result: RoundResult) -> None:
        self._last = metrics_row(manager, result)
        last = result.round == self.max_rounds - 1
        if last or (self.every > 0 and (result.round + 1) % self.every == 0):
            self._save(manager)

    def on_stop(self, manager: GameManager, results: list[RoundResult]) -> None:
        """A run stopped by Ctrl-C or SIGTERM saves its last finished round (unless just saved),
        so ``--resume`` continues from where it stopped."""
        if manager.interrupted and self._last is not None and self._last["round"] != self._saved and manager.config.mode != "evaluate":
            self._save(manager)

    def _save(self, manager: GameManager) -> None:
        assert self._last is not None
        round = int(self._last["round"])
        save_checkpoint(self.directory, round, parts(manager), books(manager) | {ROW_KEY: self._last}, self.keep)
        self._saved = round
        if self.learner_in_latest_only:
            drop_part_from_older(self.directory, LEARNER)


def parts(manager: GameManager) -> dict[str, Any]:
    return {"policy": manager.policy} | ({LEARNER: manager.learner} if manager.learner is not None else {})


def books(manager: GameManager) -> dict[str, Any]:
    reward, wins = manager.coordinator.tally(manager.peer_id)
    return {"peer": manager.peer_id, "cumulative_reward": reward, "wins": wins, DATA_KEY: manager.data.state()}
