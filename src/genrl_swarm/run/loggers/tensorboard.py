"""TensorBoard: the row's scalars as event-file scalars in ``<peer dir>/tb`` (the default view).

The writer itself is ``run.tensorboard.ScalarWriter`` (the ``tensorboard`` package alone, no
torch, written in the peer's thread); on ``--resume`` TensorBoard is told to hide the events of
the rounds played again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from genrl_swarm.run.loggers.base import LoggerContext, scalars
from genrl_swarm.run.tensorboard import ScalarWriter


class TensorBoardLogger:
    def __init__(self, context: LoggerContext) -> None:
        self._writer = ScalarWriter(context.directory / "tb", purge_step=context.start_round)

    def log(self, row: Mapping[str, Any], step: int) -> None:
        for key, value in scalars(row).items():
            self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
