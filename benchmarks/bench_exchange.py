"""Exchange latency per stage against payload size and world size, per backend, on loopback.

Each peer is its own process; each exchange carries one Rollout whose prompt is the payload
(so the codec's cost is included). p50/p95 over ``--iters`` exchanges after one warm-up.

    python benchmarks/bench_exchange.py                       # torch (gloo), worlds 2 4 8
    python benchmarks/bench_exchange.py --backends torch hivemind --worlds 2 4
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import time
from typing import Any

from common import machine, table

SIZES = {"1 KB": 1 << 10, "16 KB": 16 << 10, "256 KB": 256 << 10, "1 MB": 1 << 20, "4 MB": 4 << 20}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_backend(kind: str, rank: int, world: int, port: int, bootstrap: Any) -> Any:
    if kind == "torch":
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        from genrl_swarm.comm.torch_dist import TorchBackend

        return TorchBackend(backend="gloo", max_bytes=16 << 20)
    from genrl_swarm.comm.hivemind_dht import HivemindBackend

    peers = [] if rank == 0 else [bootstrap.get(timeout=120)]
    backend = HivemindBackend(initial_peers=peers, min_peers=world, max_bytes=16 << 20, swarm="bench")
    if rank == 0:
        for _ in range(world - 1):
            bootstrap.put(backend.visible_maddrs()[0])
    return backend


def worker(kind: str, rank: int, world: int, port: int, iters: int, bootstrap: Any, results: Any) -> None:
    from genrl_swarm.core import Rollout

    backend = make_backend(kind, rank, world, port, bootstrap)
    timings: dict[str, list[float]] = {}
    step = 0
    for label, size in SIZES.items():
        body = [Rollout(backend.peer_id, 0, 0, "t", "x" * size, ("y",))]
        for i in range(iters + 1):
            step += 1
            start = time.perf_counter()
            got = backend.exchange(step, 0, [r.__class__(backend.peer_id, step, 0, "t", r.prompt, ("y",)) for r in body], timeout=120)
            elapsed = time.perf_counter() - start
            if len(got.received) != world:
                raise RuntimeError(f"{kind} world {world}: got {got.summary()}")
            if i > 0:
                timings.setdefault(label, []).append(elapsed)
    if rank == 0:
        results.put(timings)
    backend.close()


def run(kind: str, world: int, iters: int) -> dict[str, list[float]]:
    ctx = mp.get_context("spawn")
    results, bootstrap, port = ctx.Queue(), ctx.Queue(), free_port()
    procs = [ctx.Process(target=worker, args=(kind, r, world, port, iters, bootstrap, results)) for r in range(world)]
    for p in procs:
        p.start()
    timings: dict[str, list[float]] = results.get(timeout=900)
    for p in procs:
        p.join(timeout=120)
    return timings


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--backends", nargs="+", default=["torch"], choices=["torch", "hivemind"])
    p.add_argument("--worlds", nargs="+", type=int, default=[2, 4, 8])
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args()
    rows = []
    for world in a.worlds:
        measured = {kind: run(kind, world, a.iters) for kind in a.backends}
        for label in SIZES:
            row: list[object] = [world, label]
            for kind in a.backends:
                ms = sorted(t * 1000 for t in measured[kind][label])
                row += [statistics.median(ms), ms[int(0.95 * (len(ms) - 1))]]
            if len(a.backends) == 2:
                row.append(f"{statistics.median(measured[a.backends[1]][label]) / statistics.median(measured[a.backends[0]][label]):.1f}x")
            rows.append(row)
    headers = ["world", "payload"] + [f"{k} {q} ms" for k in a.backends for q in ("p50", "p95")]
    if len(a.backends) == 2:
        headers.append(f"{a.backends[1]}/{a.backends[0]} p50")
    print(machine())
    print(f"one exchange = every peer sends one payload and receives all others'; {a.iters} exchanges per cell, loopback")
    print(table(headers, rows))


if __name__ == "__main__":
    main()
