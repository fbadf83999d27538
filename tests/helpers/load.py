"""A CPU hog beside a test: honest peers run with their cores saturated by generation, so the
tests of rejoin, resume and liveness must hold while every core is busy with something else."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# Each hog ends by itself after this many seconds even if the test process is killed -9.
HOG_LIFETIME_S = 300
_SPIN = "import time\nend = time.monotonic() + {life}\nwhile time.monotonic() < end:\n    pass\n"


@contextmanager
def cpu_hog(processes: int | None = None) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One busy-looping process per core (same priority as the test), stopped on exit."""
    count = processes or len(os.sched_getaffinity(0))
    hogs = [subprocess.Popen([sys.executable, "-c", _SPIN.format(life=HOG_LIFETIME_S)]) for _ in range(count)]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(timeout=10)
