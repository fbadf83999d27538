"""``run.loggers``: where a peer's per-round metrics go besides ``metrics.jsonl``.

    run.loggers=[jsonl,tensorboard]            # the default
    run.loggers=[jsonl,tensorboard,trackio]    # + trackio (local-first: ``trackio show``)
    run.loggers=[jsonl,wandb]                  # + W&B (WANDB_MODE=offline: files only, ``wandb sync`` later)

The names are the recipe's type (``config.LoggerName``: a wrong one is the recipe error every
enumeration gets); each is one module here with one class behind ``base.Logger``. A module, and
the library it wraps, is imported only when a recipe names it, so the core install needs neither
trackio nor wandb; a named library that is not installed is one recipe line before any peer is
built (``run.preflight``). ``jsonl`` is always on (resume, the dashboard and export read it);
``run.tensorboard=false`` is the short form of leaving ``tensorboard`` out.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from genrl_swarm.config import LoggerName
from genrl_swarm.run.loggers.base import Logger, LoggerContext


class Entry(NamedTuple):
    module: str
    cls: str
    package: str | None = None  # the library it wraps, checked before any peer is built
    extra: str = ""  # the genrl-swarm extra that installs it


LOGGERS: dict[LoggerName, Entry] = {
    "jsonl": Entry("genrl_swarm.run.loggers.jsonl", "JsonlLogger"),
    "tensorboard": Entry("genrl_swarm.run.loggers.tensorboard", "TensorBoardLogger", "tensorboard"),
    "trackio": Entry("genrl_swarm.run.loggers.trackio", "TrackioLogger", "trackio", "trackers"),
    "wandb": Entry("genrl_swarm.run.loggers.wandb", "WandbLogger", "wandb", "trackers"),
}
ALWAYS: LoggerName = "jsonl"


def missing(names: Iterable[LoggerName]) -> str | None:
    """What a named logger lacks (its library), as the recipe error's rule, or None."""
    for name in names:
        entry = LOGGERS[name]
        if entry.package is not None and importlib.util.find_spec(entry.package) is None:
            return f"must name installed loggers: {name} needs the {entry.package} package" + (
                f" (pip install 'genrl-swarm[{entry.extra}]')" if entry.extra else ""
            )
    return None


def chosen(names: Sequence[LoggerName], tensorboard: bool = True) -> list[LoggerName]:
    """The loggers a peer opens, in order: ``jsonl`` first, each name once, ``tensorboard`` only if allowed."""
    out = [ALWAYS]
    for name in names:
        if name not in out and (tensorboard or name != "tensorboard"):
            out.append(name)
    return out


def open_logger(name: LoggerName, context: LoggerContext) -> Logger:
    """The logger ``name`` for one peer (its module imported now)."""
    entry = LOGGERS[name]
    logger: Logger = getattr(importlib.import_module(entry.module), entry.cls)(context)
    return logger
