"""Shared helpers of the benchmark scripts: machine line, tables, quiet imports."""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import platform
import resource
import statistics
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


#: Set once ``machine`` has registered the exit report (a benchmark may call it more than once).
_PEAK_AT_EXIT: list[object] = []


def machine() -> str:
    """The machine line every table starts with. Calling it also arranges for the benchmark to print
    its peak memory when it exits (``peak_memory``), so every benchmark reports one without its
    own code."""
    import torch

    if not _PEAK_AT_EXIT:
        _PEAK_AT_EXIT.append(atexit.register(lambda: print(peak_memory(), flush=True)))
    return (
        f"{datetime.date.today()} | {platform.machine()} {os.cpu_count()} cores | Python {platform.python_version()} "
        f"| torch {torch.__version__} | threads {torch.get_num_threads()}"
    )


def peak_memory() -> str:
    """Peak resident memory of this benchmark, in MiB: this process's (``VmHWM`` of
    ``/proc/self/status``; ``ru_maxrss`` where there is no /proc) and the largest child process's
    that has ended and been waited for (``getrusage(RUSAGE_CHILDREN).ru_maxrss``: the largest
    single process among them and their own waited-for children, not a sum).

    Why: docs/benchmarks.md gives each benchmark's memory beside its time, and an operator needs
    it before the OOM killer does (a SmolLM2 learner with AdamW holds several GB). Which number
    matters depends on where the work runs: arms in this process (most benchmarks) -> "this
    process"; arms in child processes that are waited for (subprocess.run) -> "largest child".
    Processes started by others and not reaped by this one (Ray's workers, children of its
    raylet) may appear in neither; measure those from outside (e.g. a sampler of the tree)."""
    unit = 1024 * 1024 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / unit
    with contextlib.suppress(OSError, StopIteration):
        own = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:")) / 1024
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / unit
    return f"peak RSS: this process {own:,.0f} MiB; largest waited-for child process " + (f"{child:,.0f} MiB" if child else "none")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[(f"{c:,.1f}" if abs(c) >= 100 else f"{c:.3g}") if isinstance(c, float) else str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells)])


def mean_sd(values: Sequence[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def matmul_gflops(dtype: str = "float32", size: int = 1024, seconds: float = 1.0) -> float:
    """This machine's dense matmul rate in GFLOP/s for ``dtype`` at the current thread count: the
    better of the two libraries torch calls on a CPU, MKL (``a @ b``) and oneDNN on a packed weight
    (what the sampler's decode steps use, ``lm.packed``). On an AMD EPYC (Zen 3) oneDNN ran a
    2048-square fp32 matmul at 123 GFLOP/s where MKL ran it at 92: a limit from MKL alone would
    flatter anything that runs on oneDNN.

    Machines of one class differ (one EPYC gave fp32 ~157 / bf16 ~746, a Xeon fp32 ~140), so
    every speed table reports its percentage of the limit measured here, not a number from elsewhere."""
    import torch

    dt = getattr(torch, dtype)
    a, b = torch.randn(size, size).to(dt), torch.randn(size, size).to(dt)
    calls = [lambda: a @ b]
    if a.dtype == torch.float32 or (a.dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
        packed = torch.ops.mkldnn._reorder_linear_weight(b.t().contiguous(), size)
        calls.append(lambda: torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], ""))
    return max(_rate(call, 2 * size**3, seconds) for call in calls)


def _rate(call: Callable[[], object], flop: float, seconds: float) -> float:
    """GFLOP/s of ``call`` run repeatedly for ``seconds`` after a warm-up (thread pool, kernel choice)."""
    import time

    for _ in range(3):
        call()
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        call()
        n += 1
    return flop * n / elapsed / 1e9
