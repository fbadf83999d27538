"""The test process's memory: the session's peak RSS and the tests that raised it most.

Why: ``make test`` must pass on a machine whose memory is nearly full (issue 43.6), so the suite
says what it needs at the end of every run, and which tests to look at when that grows. The
numbers are the pytest process's own (``run.memory``: VmHWM) and the largest child process it
waited for (``getrusage``: CLI runs, workers, Chromium); children still running are not counted.
"""

from __future__ import annotations

import resource
from typing import Protocol

from genrl_swarm.run.memory import memory_metrics

_rises: list[tuple[float, str]] = []  # (MB the test added to the peak, test id)
_peak = 0.0


class Writer(Protocol):
    def write_line(self, line: str) -> None: ...


def after_test(nodeid: str) -> None:
    """Call after each test: charges any rise of the process's peak to it."""
    global _peak
    peak = memory_metrics()["mem/peak_rss_mb"]
    if _peak and peak - _peak >= 1.0:  # under a MB is the allocator's noise
        _rises.append((peak - _peak, nodeid))
    _peak = max(_peak, peak)


def report(out: Writer, top: int = 5) -> None:
    """One line for the session's peak, the largest child's, and the tests that raised the peak most."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    out.write_line(f"memory: peak RSS of the test process {_peak:.0f} MB, of its largest child process {children:.0f} MB")
    for mb, nodeid in sorted(_rises, reverse=True)[:top]:
        out.write_line(f"  +{mb:6.0f} MB  {nodeid}")
