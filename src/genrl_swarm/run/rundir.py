"""One peer directory, one process: a lock, and no silent overwrite of an earlier run.

Two processes writing one peer directory (a copied identity started beside the original, or the
same command run twice) truncate each other's ``metrics.jsonl``, interleave rows and share
``latest``. The lock is an ``fcntl.flock`` on ``run.lock`` inside the directory: the kernel drops
it when the process dies, however it dies, so a crash never leaves a stale lock. A directory
that already holds a run is continued only with ``--resume`` or wiped only with ``--overwrite``.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
from enum import Enum, auto
from pathlib import Path

from genrl_swarm.run.checkpoint import remove_stale_temporaries
from genrl_swarm.run.storage import writing

log = logging.getLogger(__name__)

LOCK_FILE = "run.lock"
RECIPE_FILE = "recipe.yaml"  # the recipe the peer's latest process ran (composed, with its overrides): what export tells
RUN_OUTPUTS = ("metrics.jsonl", "events.jsonl", "checkpoints", "tb")  # what --overwrite removes


class RunDirError(RuntimeError):
    """The run directory is in use or holds a run this command was not told what to do with."""


class Existing(Enum):
    """What to do with a directory that already holds a run."""

    REFUSE = auto()
    RESUME = auto()
    OVERWRITE = auto()


class RunDirLock:
    """Held from the build of a peer to the end of its game; ``release`` is idempotent, and the
    lock is also an ``after_game`` hook (the game is over: the directory is free)."""

    def __init__(self, directory: Path, existing: Existing) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._fd: int | None = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.release()
            why = "a second copy of this peer's identity, or the same run started twice"
            raise RunDirError(f"{directory} is in use by another running process ({why}): stop it, or give this one another run.dir") from None
        try:
            self._settle(existing)
        except BaseException:
            self.release()
            raise
        try:
            with writing(directory / LOCK_FILE):
                os.ftruncate(self._fd, 0)
                os.write(self._fd, f"{os.getpid()}\n".encode())  # who holds it, for a person looking
        except BaseException:
            self.release()
            raise

    def _settle(self, existing: Existing) -> None:
        if holds_run(self.directory):
            if existing is Existing.REFUSE:
                raise RunDirError(f"{self.directory} already holds a run: pass --resume to continue it, or --overwrite to start over and delete it")
            if existing is Existing.OVERWRITE:
                for name in RUN_OUTPUTS:
                    path = self.directory / name
                    if path.is_dir():
                        shutil.rmtree(path)
                    else:
                        path.unlink(missing_ok=True)
        if removed := remove_stale_temporaries(self.directory / "checkpoints"):
            log.info("%s: removed %d temporary checkpoint file(s) a process killed mid-save left behind", self.directory, removed)

    def __call__(self, *_: object) -> None:
        self.release()

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def holds_run(directory: Path) -> bool:
    """Whether an earlier run left rows or checkpoints in this peer directory."""
    metrics = directory / "metrics.jsonl"
    checkpoints = directory / "checkpoints"
    return (metrics.is_file() and metrics.stat().st_size > 0) or (checkpoints.is_dir() and any(checkpoints.iterdir()))
