"""TensorBoard scalars written with the ``tensorboard`` package alone: metrics are logged in every
run, and the bandit and the core install without torch (whose ``SummaryWriter`` wraps the same
event-file writer).

Why not tensorboard's ``EventFileWriter``: it writes from a thread of its own, so a disk that
refuses a write (full, read-only, a file-size limit) prints that thread's traceback before the
error reaches the peer. Records are written here, in the peer's thread, with the same framing
(``RecordWriter``); a row is a handful of scalars, flushed once a round.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import time
from pathlib import Path
from typing import Any

from genrl_swarm.run.storage import writing

_FILES = itertools.count()  # event files opened by this process: two in one second get two names


class ScalarWriter:
    """One event file of scalars under ``directory``. ``purge_step``: TensorBoard hides the
    events this directory holds from that step on (a resumed run plays those rounds again); it
    is told by a session-start event at that step, the way every TensorBoard writer says it."""

    def __init__(self, directory: Path, purge_step: int | None = None) -> None:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event, self._summary = Event, Summary
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILES)}"
        self._records = RecordWriter(self.path.open("wb"))
        self._add(Event(wall_time=time.time(), file_version="brain.Event:2"))  # the first event names the version
        if purge_step is not None:
            self._add(Event(step=purge_step, wall_time=time.time(), session_log=SessionLog(status=SessionLog.START)))
        self.flush()

    def _add(self, event: Any) -> None:
        with writing(self.path):
            self._records.write(event.SerializeToString())

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=float(value))])
        self._add(self._event(step=int(step), wall_time=time.time(), summary=summary))

    def flush(self) -> None:
        with writing(self.path):
            self._records.flush()

    def close(self) -> None:
        """Close the file; a write the disk refused was raised by the flush that hit it, and
        closing would only retry the same bytes."""
        with contextlib.suppress(OSError):
            self._records.close()
