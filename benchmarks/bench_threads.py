"""The thread budget (issue 33): N in-process peers (threads) run SmolLM2 forwards at the same
time with torch's default threads against the budget (``max(1, cores // peers)`` each).

Pairs alternate the order; each trial prints the median seconds per forward and the 1-minute
load average when it started (the machine may be shared: compare within a pair).

    python benchmarks/bench_threads.py --pairs 4
    python benchmarks/bench_threads.py --peers 3 --model tiny-random
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import torch
from common import machine, table

from genrl_swarm.paradigms.lm.models import load_model
from genrl_swarm.run.threads import available_cores, thread_budget


def trial(model: torch.nn.Module, ids: torch.Tensor, peers: int, threads: int, forwards: int) -> tuple[float, float]:
    """(wall seconds, median seconds per forward) of ``peers`` threads each running ``forwards``."""
    torch.set_num_threads(threads)
    times: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def peer() -> None:
        try:
            with torch.inference_mode():
                for _ in range(forwards):
                    start = time.perf_counter()
                    model(ids)
                    with lock:
                        times.append(time.perf_counter() - start)
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)

    workers = [threading.Thread(target=peer) for _ in range(peers)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - start, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    parser.add_argument("--peers", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--forwards", type=int, default=3, help="forwards per peer per trial")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    a = parser.parse_args()
    print(machine())
    default, budget = torch.get_num_threads(), thread_budget(available_cores(), a.peers, env={}).threads
    model, _ = load_model(a.model, device="cpu", dtype="float32")
    model.eval()
    ids = torch.randint(0, min(1000, model.config.vocab_size), (a.batch, a.tokens))
    trial(model, ids, a.peers, budget, 1)  # warm-up
    rows = []
    for pair in range(a.pairs):
        for threads in (default, budget) if pair % 2 == 0 else (budget, default):
            load = os.getloadavg()[0]
            wall, median = trial(model, ids, a.peers, threads, a.forwards)
            rows.append([pair, threads, "budget" if threads == budget else "torch default", round(wall, 2), round(median, 3), round(load, 2)])
            print("  ", rows[-1], flush=True)
    print(table(["pair", "threads per peer", "setting", "wall s", "s per forward (median)", "load 1 min"], rows))


if __name__ == "__main__":
    main()
