"""trackio (local-first, wandb-like): a run per peer in the project named after the recipe.

Data goes where trackio keeps it (``TRACKIO_DIR``, by default under the Hugging Face cache);
``trackio show --project <recipe name>`` opens it. Peers hosted in one process each get their
own ``trackio.Run``, started in a context of its own: ``trackio.init`` finishes the run current
in its context, which would end the peer opened before.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import logging
from collections.abc import Mapping
from typing import Any

import trackio

from genrl_swarm.run.loggers.base import LoggerContext, scalars

log = logging.getLogger(__name__)


class TrackioLogger:
    def __init__(self, context: LoggerContext) -> None:
        name = f"{context.run}/{context.peer}"
        with contextlib.redirect_stdout(io.StringIO()):  # its banner, once per peer; one log line instead
            self._run = contextvars.Context().run(
                trackio.init,
                project=context.game,
                name=name,
                group=context.run,
                config=dict(context.recipe),
                embed=False,
                auto_log_cpu=False,
                auto_log_gpu=False,
            )
        log.info("%s: trackio run %s in project %s (trackio show --project %s)", context.peer, name, context.game, context.game)

    def log(self, row: Mapping[str, Any], step: int) -> None:
        self._run.log(scalars(row), step=step)

    def close(self) -> None:
        self._run.finish()  # type: ignore[no-untyped-call]
