"""envd under load: N concurrent calculator sessions held by a real server on loopback.

For each N the script starts ``genrl-swarm envd`` (its own process tree: controller, workers,
sandboxed children), opens N sessions, then runs a bounded request loop: ``--concurrency``
requests in flight at any time, each a ``calculate`` step of the next session in turn, until
every session has taken ``--steps-per-session`` steps (at least ``--min-steps`` in all). It
reports the sessions the server holds at the end, resets/s, steps/s, p50/p95 step latency as the
client sees it, and the RSS of the whole server tree. The client runs on the same machine.

    nice python benchmarks/bench_envd.py                     # N = 100, 1000, 10000
    nice python benchmarks/bench_envd.py --sessions 1000 --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import contextlib

from common import table  # noqa: E402

from genrl_swarm.envd import TaskSpec, ToolCall  # noqa: E402
from genrl_swarm.envd.client import AsyncRemoteEnv  # noqa: E402


def machine() -> str:
    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
        platform.machine(),
    )
    load = os.getloadavg()[0]
    return f"{datetime.date.today()} | {model}, {os.cpu_count()} cores (load {load:.1f} at start) | Python {platform.python_version()}"


def tree_rss(root: int) -> int:
    """RSS of ``root`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return total


@dataclass
class Result:
    sessions: int
    held: int
    resets_per_s: float
    steps: int
    steps_per_s: float
    p50_ms: float
    p95_ms: float
    rss_mb: float
    errors: int


def start_server(args: argparse.Namespace, sessions: int) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "genrl_swarm.cli", "envd", "--port", "0", "--workers", str(args.workers), "--sandboxes", str(args.sandboxes),
               "--max-sessions", str(sessions), "--max-turns", "1024", "--ttl", "3600", "--tasks", "calculator"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"listening on (\S+) ", line)
    if not found:
        proc.kill()
        raise SystemExit(f"envd did not start: {line!r}")
    return proc, found[1]


async def bounded(count: int, concurrency: int, job: Callable[[int], Awaitable[None]]) -> list[float]:
    """Run ``job(i)`` for i < count with at most ``concurrency`` in flight; latencies in seconds.
    Lane k runs i = k, k + concurrency, k + 2 * concurrency, ... in order."""
    latencies: list[float] = []

    async def lane(k: int) -> None:
        for i in range(k, count, concurrency):
            start = time.perf_counter()
            await job(i)
            latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(lane(k) for k in range(concurrency)))
    return latencies


async def measure(args: argparse.Namespace, n: int) -> Result:
    proc, address = start_server(args, n)
    client = AsyncRemoteEnv(address, timeout=60.0)
    errors = 0
    try:
        sessions: list[str] = [""] * n
        start = time.perf_counter()

        async def reset(i: int) -> None:
            sessions[i] = (await client.reset(TaskSpec("calculator", i))).session

        await bounded(n, args.concurrency, reset)
        resets_per_s = n / (time.perf_counter() - start)
        total, c = max(args.min_steps, n * args.steps_per_session), args.concurrency
        assert n >= c, f"--concurrency {c} needs at least as many sessions"
        rng = random.Random(0)
        expressions = [f"({rng.randint(1, 999)} + {rng.randint(1, 999)}) * {rng.randint(2, 99)}" for _ in range(256)]

        async def step(i: int) -> None:
            nonlocal errors
            lane, turn = i % c, i // c  # lane k steps only the sessions k, k + c, ...: never two steps of one session at once
            session = sessions[lane + c * (turn % (n // c))]
            result = await client.step(session, ToolCall("calculate", {"expression": expressions[i % 256]}))
            errors += result.message.content.startswith("Error")

        start = time.perf_counter()
        latencies = sorted(await bounded(total, args.concurrency, step))
        elapsed = time.perf_counter() - start
        stats = await client.stats()
        rss = tree_rss(proc.pid)
    finally:
        await client.shutdown()
        proc.terminate()
        proc.wait(timeout=60)
    q = statistics.quantiles(latencies, n=100)
    return Result(n, stats.sessions, resets_per_s, total, total / elapsed, q[49] * 1000, q[94] * 1000, rss / 2**20, errors)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, nargs="+", default=[100, 1000, 10_000])
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight (the bounded request loop)")
    p.add_argument("--steps-per-session", type=int, default=1)
    p.add_argument("--min-steps", type=int, default=3000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--sandboxes", type=int, default=2, help="sandboxed tool processes per worker")
    args = p.parse_args()
    header = machine()
    rows = []
    for n in args.sessions:
        r = asyncio.run(measure(args, n))
        print(f"  N={n}: held {r.held}, {r.steps_per_s:.0f} steps/s, p95 {r.p95_ms:.1f} ms", flush=True)
        rows.append(
            [
                f"{r.sessions:,}",
                f"{r.held:,}",
                f"{r.resets_per_s:.0f}",
                f"{r.steps:,}",
                f"{r.steps_per_s:.0f}",
                f"{r.p50_ms:.1f}",
                f"{r.p95_ms:.1f}",
                f"{r.rss_mb:.0f}",
                r.errors,
            ]
        )
    print(f"\nenvd, calculator task, {args.workers} workers x {args.sandboxes} sandboxes, {args.concurrency} requests in flight | {header}")
    print(table(["sessions", "held", "resets/s", "steps", "steps/s", "p50 ms", "p95 ms", "server RSS MB", "tool errors"], rows))


if __name__ == "__main__":
    main()
