"""Weights & Biases: a run per peer, grouped by run directory, in the project named after the recipe.

``WANDB_MODE=offline`` writes ``<peer dir>/wandb/offline-run-*`` and nothing leaves the machine
(``wandb sync`` uploads it later); online it needs ``WANDB_API_KEY`` or ``wandb login``. Peers
hosted in one process each get their own run (``reinit="create_new"``); W&B does not capture the
console (the peers share it) and is silent: one log line per peer says where its run is.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import wandb

from genrl_swarm.run.loggers.base import LoggerContext, scalars

log = logging.getLogger(__name__)


class WandbLogger:
    def __init__(self, context: LoggerContext) -> None:
        self._run = wandb.init(
            project=context.game,
            name=f"{context.run}/{context.peer}",
            group=context.run,
            config=dict(context.recipe),
            dir=str(context.directory),
            reinit="create_new",
            settings=wandb.Settings(console="off", silent=True),
        )
        log.info(
            "%s: W&B run %s in project %s (%s mode: %s)",
            context.peer,
            self._run.name,
            context.game,
            self._run.settings.mode,
            Path(self._run.dir).parent,
        )

    def log(self, row: Mapping[str, Any], step: int) -> None:
        self._run.log(scalars(row), step=step)

    def close(self) -> None:
        self._run.finish()
