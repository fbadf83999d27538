"""``metrics.jsonl``: the record of a peer's rounds, one JSON object a line.

Always written, whatever ``run.loggers`` says: ``--resume``, the dashboard, the model card of
``genrl-swarm export`` and the reward plot read it. Each line is appended whole and the file is
only ever rewritten by ``resume_rows`` (renamed into place), so a kill at any instant leaves
every earlier row readable.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from genrl_swarm.run.checkpoint import write_atomic
from genrl_swarm.run.loggers.base import LoggerContext
from genrl_swarm.run.storage import writing

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


class JsonlLogger:
    """Appends each row to ``<peer dir>/metrics.jsonl``."""

    def __init__(self, context: LoggerContext) -> None:
        context.directory.mkdir(parents=True, exist_ok=True)
        self.path = context.directory / METRICS_FILE

    def log(self, row: Mapping[str, Any], step: int) -> None:
        with writing(self.path), self.path.open("a") as f:
            f.write(json.dumps(dict(row)) + "\n")

    def close(self) -> None:
        """Nothing held open: each row opens, appends and closes."""


def resume_rows(path: Path, start_round: int, carried: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Make ``path`` hold each round before ``start_round`` once, before a (resumed) run appends.

    Rows of ``start_round`` and later (played after the checkpoint the run resumes from, or by an
    earlier run in the same folder) are removed and logged, so every round appears once and a
    round the resumed peer then skips (catch-up) leaves no row behind. Returns ``carried`` (the
    row the checkpoint holds for round ``start_round - 1``) when the file lacks it: the process
    died after the checkpoint and before that row, and the caller writes it again to every logger.
    """
    rows = read_metrics(path) if path.exists() else []
    kept = [row for row in rows if row.get("round", -1) < start_round]
    if len(kept) < len(rows):
        dropped = sorted({row.get("round", -1) for row in rows} - {row["round"] for row in kept})
        log.info(
            "%s: rounds %d-%d were played after the checkpoint this run resumes from: their rows are removed and the rounds played again",
            path,
            dropped[0],
            dropped[-1],
        )
    if path.exists():  # also drops a row cut short by a kill; renamed into place, so a kill now loses nothing
        write_atomic(path, "".join(json.dumps(row) + "\n" for row in kept))
    if carried is not None and carried.get("round") == start_round - 1 and not any(row.get("round") == carried["round"] for row in kept):
        log.info("%s: the row of round %d was lost (stopped after its checkpoint): written from the checkpoint", path, carried["round"])
        return dict(carried)
    return None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl; a line cut short by a crash mid-write is skipped."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows
