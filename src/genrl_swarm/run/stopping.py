"""Ctrl-C and SIGTERM as an orderly stop: the peers finish their round step, save, then the process exits.

Why not KeyboardInterrupt: on CPython 3.11 a ``Thread.join`` cut short by KeyboardInterrupt can
mark a still-running thread as stopped (CPython issue 90882), so the launcher returned, printed
its summary and exited while the peers were still writing their stop checkpoint. Here the
handlers never raise: the first signal only asks the peers to stop (``on_stop`` sets flags) and
the main thread's ``join`` carries on undisturbed until every peer is done. A second signal
quits at once; checkpoints are renamed into place, so that never leaves one half-written.

SIGTERM (what systemd, Docker and Kubernetes send) behaves like Ctrl-C; the exit status is
128 + the signal's number: 130 for SIGINT, 143 for SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any, TextIO

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_status(received: signal.Signals) -> int:
    """The shell's convention for a process ended by a signal: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(received)


class Terminated(KeyboardInterrupt):
    """SIGTERM while the run is starting (loading, building): handled like Ctrl-C there."""


@contextmanager
def terminate_like_interrupt() -> Iterator[None]:
    """While the run starts, SIGTERM interrupts it the way Ctrl-C does (no peer to save yet)."""

    def handle(signum: int, frame: FrameType | None) -> None:
        raise Terminated

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class StopSignals:
    """While entered (in the main thread): the first SIGINT or SIGTERM is recorded in ``received``
    and calls ``on_stop`` (which must only set flags: it runs inside a signal handler); a second
    one exits the process at once with 128 + its number. Elsewhere than in the main thread,
    Python delivers no signals, so entering does nothing."""

    def __init__(self, on_stop: Callable[[], None], stream: TextIO | None = None) -> None:
        self.on_stop, self.stream = on_stop, stream
        self.received: signal.Signals | None = None
        self._previous: dict[signal.Signals, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        stream = self.stream or sys.stderr
        if self.received is not None:
            print("quit without waiting for the peers", file=stream, flush=True)
            os._exit(exit_status(signal.Signals(signum)))
        self.received = signal.Signals(signum)
        name = "Ctrl-C" if self.received == signal.SIGINT else self.received.name
        print(f"\ninterrupted ({name}): every peer finishes its round step and saves (press Ctrl-C again to quit at once)", file=stream, flush=True)
        self.on_stop()
