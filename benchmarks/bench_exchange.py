"""Exchange latency per stage against payload size and world size, per backend, on loopback.

torch: each peer is its own process (gloo). hivemind: each peer is its own process too, with its
DHT process and p2pd daemon; payloads travel over libp2p streams, membership over the DHT. Each
exchange carries one TokenRollout of the payload's size (ids and log-probs, so encoding and
checked decoding are included). p50/p95 over ``--iters`` exchanges after one warm-up.

    python benchmarks/bench_exchange.py                       # torch (gloo), worlds 2 4 8
    python benchmarks/bench_exchange.py --backends torch hivemind --worlds 4 --sizes "256 KB" "4 MB"
    python benchmarks/bench_exchange.py --bandit 4            # 4-peer bandit: exchange time per round, gloo vs hivemind
    python benchmarks/bench_exchange.py --backends torch hivemind --worlds 4 8 --sizes "16 KB" "256 KB" --repeats 5
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
from pathlib import Path
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


def exchanges(backend: Any, world: int, iters: int) -> tuple[dict[str, list[float]], int]:
    """Seconds per exchange by payload label, and the last round exchanged in."""
    from genrl_swarm.core import TokenRollout

    timings: dict[str, list[float]] = {}
    step = 0
    for label, size in SIZES.items():
        if size > backend.codec.max_bytes:
            continue  # refused before sending (over the backend's max_bytes)
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
    return timings, step


def torch_worker(rank: int, world: int, port: int, iters: int, results: Any) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from genrl_swarm.comm.torch_dist import TorchBackend

    backend = TorchBackend(backend="gloo", max_bytes=16 << 20)
    timings, _ = exchanges(backend, world, iters)
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


def hivemind_peer(index: int, world: int, iters: int, initial: str | None) -> None:
    """One hivemind peer of the benchmark, in its own process; peer 0 prints the timings."""
    from genrl_swarm.comm.hivemind.dht import HivemindBackend

    backend = HivemindBackend(initial_peers=[initial] if initial else [], swarm=f"bench{world}", max_bytes=16 << 20)
    print("MADDR", backend.visible_maddrs()[0], flush=True)
    try:
        end = time.monotonic() + 120
        while len(backend.membership.live()) < world:  # every peer in before the first exchange
            if time.monotonic() > end:
                raise RuntimeError(f"only {len(backend.membership.live())} of {world} peers joined")
            time.sleep(0.05)
        timings, last = exchanges(backend, world, iters)
        # A barrier, so nobody leaves while others still pull. Its round is the next one: a peer
        # keeps its slots for the 4 rounds before its newest, and a round far ahead made a fast
        # peer drop the last round's bytes while a slow one was still asking for them.
        backend.exchange(last + 1, 0, [payload(1, 0)], timeout=30, body_type=type(payload(1, 0)))
        time.sleep(1.0)
        if index == 0:
            print("TIMINGS", json.dumps(timings), flush=True)
    finally:
        backend.close()


def run_hivemind(world: int, iters: int) -> dict[str, list[float]]:
    """``world`` peer processes (fresh interpreters: hivemind forks its DHT process, which does
    not mix with torch's spawn machinery); returns peer 0's timings."""
    base = [sys.executable, __file__, "--hivemind-world", str(world), "--iters", str(iters), "--sizes", *SIZES]
    first = subprocess.Popen([*base, "--hivemind-peer", "0"], stdout=subprocess.PIPE, text=True)
    assert first.stdout is not None
    maddr = first.stdout.readline().split()[-1]
    others = [subprocess.Popen([*base, "--hivemind-peer", str(i), "--initial", maddr], stdout=subprocess.DEVNULL) for i in range(1, world)]
    try:
        out, _ = first.communicate(timeout=900)
        for p in others:
            p.wait(timeout=120)
    finally:
        for p in [first, *others]:
            p.kill()
    line = next(x for x in out.splitlines() if x.startswith("TIMINGS "))
    timings: dict[str, list[float]] = json.loads(line.split(" ", 1)[1])
    return timings


def run(kind: str, world: int, iters: int) -> dict[str, list[float]]:
    return run_torch(world, iters) if kind == "torch" else run_hivemind(world, iters)


def bandit(kind: str, world: int, rounds: int, tmp: str) -> list[float]:
    """Exchange seconds per round (both stages) of a ``world``-peer bandit game, rounds 1..end."""
    from genrl_swarm.run.metrics import read_metrics

    run_dir = os.path.join(tmp, "run")
    os.makedirs(tmp, exist_ok=True)
    common = ["--recipe", "bandit", f"run.dir={run_dir}", f"game.max_rounds={rounds}", "game.mode=train",
              "run.tensorboard=false", "run.plot=false", "run.console=false", "run.checkpoint_every=1000"]  # fmt: skip
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    if kind == "torch":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world), "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "-m", "genrl_swarm.cli", "run", *common,
               "communication=torch", "swarm.num_peers=1"]  # fmt: skip
        subprocess.run(cmd, timeout=900, check=True, **quiet)  # type: ignore[call-overload]
    else:
        swarm = [sys.executable, "-m", "genrl_swarm.cli", "swarm", *common, f"communication.min_peers={world}"]
        log_path = os.path.join(tmp, "first.log")
        with open(log_path, "w") as sink:
            first = subprocess.Popen([*swarm, "--identity", os.path.join(tmp, "p0.key")], stdout=sink, stderr=subprocess.STDOUT)
            end, maddr = time.monotonic() + 120, ""
            while not maddr and time.monotonic() < end:
                maddr = next((x.rsplit(" ", 1)[1] for x in Path(log_path).read_text().splitlines() if "--initial-peers " in x), "")
                time.sleep(0.1)
            join = ["--initial-peers", maddr]
            others = [subprocess.Popen([*swarm, "--identity", os.path.join(tmp, f"p{i}.key"), *join], **quiet) for i in range(1, world)]  # type: ignore[call-overload]
            for p in [first, *others]:
                if p.wait(timeout=900) != 0:
                    raise RuntimeError(f"a hivemind bandit peer failed; see {log_path}")
    rows = [r for peer in os.listdir(run_dir) if os.path.isfile(f := os.path.join(run_dir, peer, "metrics.jsonl")) for r in read_metrics(Path(f))]
    return [sum(v for k, v in r.items() if k.startswith("time/exchange_s")) for r in rows if r["round"] > 0]


def bandit_table(world: int, rounds: int) -> str:
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        measured = {kind: sorted(t * 1000 for t in bandit(kind, world, rounds, os.path.join(tmp, kind))) for kind in ("torch", "hivemind")}
    p50 = {k: statistics.median(v) for k, v in measured.items()}
    rows.append([world, rounds, p50["torch"], p50["hivemind"], f"{p50['hivemind'] / p50['torch']:.1f}x"])
    return table(["peers", "rounds", "gloo exchange ms/round p50", "hivemind exchange ms/round p50", "hivemind/gloo"], rows)


def exchange_table(backends: list[str], worlds: list[int], iters: int, repeats: int) -> str:
    """p50 and p95 per cell; with ``repeats`` > 1 the backends alternate (which goes first flips
    each repeat, so load drifts hit both alike) and each cell shows the median over repeats of the
    p50s with their range, and the median and range of the per-repeat ratio."""
    p50s: dict[tuple[int, str, str], list[float]] = {}
    p95s: dict[tuple[int, str, str], list[float]] = {}
    before = os.getloadavg()[0]
    for rep in range(repeats):
        for world in worlds:
            for kind in backends if rep % 2 == 0 else backends[::-1]:
                for label, seconds in run(kind, world, iters).items():
                    ms = sorted(t * 1000 for t in seconds)
                    p50s.setdefault((world, label, kind), []).append(statistics.median(ms))
                    p95s.setdefault((world, label, kind), []).append(ms[int(0.95 * (len(ms) - 1))])
    rows = []
    for world in worlds:
        for label in SIZES:
            row: list[object] = [world, label]
            for kind in backends:
                cell = p50s.get((world, label, kind))
                row += [_spread(cell), _spread(p95s[(world, label, kind)])] if cell else ["refused (size limit)", "-"]
            if len(backends) == 2:
                pair = [p50s.get((world, label, k)) for k in backends]
                row.append(_spread([h / t for t, h in zip(*pair)], "x") if pair[0] and pair[1] else "-")  # type: ignore[arg-type]
            rows.append(row)
    headers = ["world", "payload"] + [f"{k} {q} ms" for k in backends for q in ("p50", "p95")]
    if len(backends) == 2:
        headers.append(f"{backends[1]}/{backends[0]} p50")
    return table(headers, rows) + f"\n{repeats} repeat(s); load average (1 min) {before:.1f} before, {os.getloadavg()[0]:.1f} after"


def _spread(values: list[float], unit: str = "") -> str:
    """One value, or the median of several with their range."""
    if len(values) == 1:
        return f"{values[0]:.{2 if unit else 1}f}{unit}"
    return f"{statistics.median(values):.{2 if unit else 1}f}{unit} [{min(values):.{2 if unit else 1}f}-{max(values):.{2 if unit else 1}f}]"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--backends", nargs="+", default=["torch"], choices=["torch", "hivemind"])
    p.add_argument("--worlds", nargs="+", type=int, default=[2, 4, 8])
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--repeats", type=int, default=1, help="alternate the backends this many times; cells show the median and range")
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES), help="payload sizes to measure")
    p.add_argument("--bandit", type=int, default=0, metavar="PEERS", help="instead: exchange time per round of a bandit game, gloo vs hivemind")
    p.add_argument("--rounds", type=int, default=30, help="bandit rounds")
    p.add_argument("--hivemind-world", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--hivemind-peer", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--initial", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    for label in list(SIZES):
        if label not in a.sizes:
            del SIZES[label]
    if a.hivemind_peer >= 0:
        hivemind_peer(a.hivemind_peer, a.hivemind_world, a.iters, a.initial)
        return
    if a.bandit:
        print(machine())
        print(f"exchange time per round (2 stages), each peer a process, loopback; rounds 1..{a.rounds - 1}, all peers")
        print(bandit_table(a.bandit, a.rounds))
        return
    print(machine())
    print(f"one exchange = every peer sends one payload and receives all others'; {a.iters} exchanges per cell, loopback")
    print(exchange_table(a.backends, a.worlds, a.iters, a.repeats))


if __name__ == "__main__":
    main()
