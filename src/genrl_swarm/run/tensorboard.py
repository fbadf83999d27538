"""TensorBoard scalars written with the ``tensorboard`` package alone: metrics are logged in every
run, and the bandit and the core install without torch (whose ``SummaryWriter`` wraps the same
event-file writer)."""

from __future__ import annotations

import time
from pathlib import Path


class ScalarWriter:
    """One event file of scalars under ``directory``. ``purge_step``: TensorBoard hides the
    events this directory holds from that step on (a resumed run plays those rounds again); it
    is told by a session-start event at that step, the way every TensorBoard writer says it."""

    def __init__(self, directory: Path, purge_step: int | None = None) -> None:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary = Event, Summary
        self._file = EventFileWriter(str(directory))  # its first event names the file version (2)
        if purge_step is not None:
            self._file.add_event(Event(step=purge_step, wall_time=time.time(), session_log=SessionLog(status=SessionLog.START)))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=float(value))])
        self._file.add_event(self._event(step=int(step), wall_time=time.time(), summary=summary))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
