"""This process's memory, for the metrics row of every round (``mem/rss_mb``, ``mem/peak_rss_mb``).

Why per round: an LM peer's memory is set by its model, its optimizer and the rollouts it
holds, and an operator sharing a machine needs the number before the OOM killer gives it
(2 SmolLM2-135M peers hold ~7.8 GB). A slope over rounds is a leak; a step is a bigger batch.

Peers hosted in one process (the in-memory backend) share it: each reports the process's RSS,
not a share of it. Linux reads ``/proc/self/status`` (VmRSS, VmHWM); elsewhere the peak comes
from ``getrusage`` and the current value is left out.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

STATUS = Path("/proc/self/status")
MB = 1 << 20


def _status_kib() -> dict[str, int]:
    """VmRSS and VmHWM in KiB, or {} where /proc is not there."""
    try:
        lines = STATUS.read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def _peak_rusage_mb() -> float:
    """ru_maxrss: KiB on Linux, bytes on macOS."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MB if sys.platform == "darwin" else peak / 1024


def memory_metrics() -> dict[str, float]:
    """``mem/rss_mb`` (resident now) and ``mem/peak_rss_mb`` (the most resident since start), in MiB."""
    status = _status_kib()
    out = {"mem/peak_rss_mb": round(status["VmHWM"] / 1024 if "VmHWM" in status else _peak_rusage_mb(), 1)}
    if "VmRSS" in status:
        out["mem/rss_mb"] = round(status["VmRSS"] / 1024, 1)
    return out
