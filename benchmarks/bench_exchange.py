"""Exchange latency per stage against payload size and world size, per backend, on loopback.

torch: each peer is its own process (gloo). hivemind: each peer has its own DHT process and
p2pd daemon; their exchange loops run as threads of this process (hivemind's DHT does not start
inside a spawn-started worker). Each exchange carries one TokenRollout of the payload's size
(ids and log-probs, so encoding and checked decoding are included). p50/p95 over ``--iters``
exchanges after one warm-up.

    python benchmarks/bench_exchange.py                       # torch (gloo), worlds 2 4 8
    python benchmarks/bench_exchange.py --backends torch hivemind --worlds 2 4
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

from common import machine, table

SIZES = {"1 KB": 1 << 10, "16 KB": 16 << 10, "256 KB": 256 << 10, "1 MB": 1 << 20, "4 MB": 4 << 20}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def payload(size: int, step: int) -> Any:
    """A TokenRollout of about ``size`` encoded bytes, shaped like real LM bodies: per token an
    id (3 bytes in msgpack) and a behaviour log-prob (9 bytes), in samples of at most 65536."""
    from genrl_swarm.core import TokenRollout, TokenSample

    tokens = max(1, size // 12)
    per = min(tokens, 1 << 16)
    samples = tuple(TokenSample((1000,) * per, (-1.0,) * per, "length") for _ in range(-(-tokens // per)))
    return TokenRollout("t", "0" * 24, (1000,) * 8, samples, step, "bench")


def exchanges(backend: Any, world: int, iters: int) -> dict[str, list[float]]:
    from genrl_swarm.core import TokenRollout

    timings: dict[str, list[float]] = {}
    step = 0
    for label, size in SIZES.items():
        if size > backend.codec.max_bytes:
            continue  # refused before sending (hivemind: 4 MiB messages; a larger DHT value crashes its DHT process)
        for i in range(iters + 1):
            step += 1
            body = payload(size, step)
            start = time.perf_counter()
            got = backend.exchange(step, 0, [body], timeout=120, body_type=TokenRollout)
            elapsed = time.perf_counter() - start
            if len(got.received) != world:
                raise RuntimeError(f"{type(backend).__name__} world {world}: got {got.summary()}")
            if i > 0:
                timings.setdefault(label, []).append(elapsed)
    return timings


def torch_worker(rank: int, world: int, port: int, iters: int, results: Any) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from genrl_swarm.comm.torch_dist import TorchBackend

    backend = TorchBackend(backend="gloo", max_bytes=16 << 20)
    timings = exchanges(backend, world, iters)
    if rank == 0:
        results.put(timings)
    backend.close()


def run_torch(world: int, iters: int) -> dict[str, list[float]]:
    ctx = mp.get_context("spawn")
    results, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=torch_worker, args=(r, world, port, iters, results)) for r in range(world)]
    for p in procs:
        p.start()
    timings: dict[str, list[float]] = results.get(timeout=900)
    for p in procs:
        p.join(timeout=120)
    return timings


def run_hivemind(world: int, iters: int) -> dict[str, list[float]]:
    from concurrent.futures import ThreadPoolExecutor

    from genrl_swarm.comm.hivemind_dht import HivemindBackend

    first = HivemindBackend(min_peers=world, swarm=f"bench{world}")
    peers = [first] + [
        HivemindBackend(initial_peers=first.visible_maddrs(), min_peers=world, swarm=f"bench{world}")
        for _ in range(world - 1)
    ]
    try:
        with ThreadPoolExecutor(world) as pool:
            return list(pool.map(lambda b: exchanges(b, world, iters), peers))[0]
    finally:
        for peer in peers:
            peer.close()


def run(kind: str, world: int, iters: int) -> dict[str, list[float]]:
    if kind == "torch":
        return run_torch(world, iters)
    # A fresh interpreter: hivemind's forked DHT processes break in one that used torch's spawn machinery.
    cmd = [sys.executable, __file__, "--hivemind-world", str(world), "--iters", str(iters), "--sizes", *SIZES]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=True)
    timings: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return timings


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--backends", nargs="+", default=["torch"], choices=["torch", "hivemind"])
    p.add_argument("--worlds", nargs="+", type=int, default=[2, 4, 8])
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES), help="payload sizes to measure")
    p.add_argument("--hivemind-world", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args()
    for label in list(SIZES):
        if label not in a.sizes:
            del SIZES[label]
    if a.hivemind_world:
        print(json.dumps(run_hivemind(a.hivemind_world, a.iters)))
        return
    rows = []
    for world in a.worlds:
        measured = {kind: run(kind, world, a.iters) for kind in a.backends}
        for label in SIZES:
            row: list[object] = [world, label]
            for kind in a.backends:
                ms = sorted(t * 1000 for t in measured[kind].get(label, []))
                row += [statistics.median(ms), ms[int(0.95 * (len(ms) - 1))]] if ms else ["refused (size limit)", "-"]
            if len(a.backends) == 2 and all(label in measured[k] for k in a.backends):
                row.append(f"{statistics.median(measured[a.backends[1]][label]) / statistics.median(measured[a.backends[0]][label]):.1f}x")
            elif len(a.backends) == 2:
                row.append("-")
            rows.append(row)
    headers = ["world", "payload"] + [f"{k} {q} ms" for k in a.backends for q in ("p50", "p95")]
    if len(a.backends) == 2:
        headers.append(f"{a.backends[1]}/{a.backends[0]} p50")
    print(machine())
    print(f"one exchange = every peer sends one payload and receives all others'; {a.iters} exchanges per cell, loopback")
    print(table(headers, rows))


if __name__ == "__main__":
    main()
