"""Seeded sampling's cost: the lean sampler with its public per-row keys (``lm.seeding``) against
the same sampler drawing its uniform numbers from ``torch.rand`` (the sampler before issue 45.2).

The two arms run the same code but for where ``u`` comes from, so the difference is the keys'
cost: deriving each row's key per call (one BLAKE2b-256 a row) and one keyed BLAKE2b-64 per live
row per token. EOS is switched off so both arms generate exactly ``rows x new tokens`` tokens (a
seeded and an unseeded draw end rows at different steps). Arms alternate call by call; the
median wall and CPU (this process's) time and the median of the paired ratios are reported, with
the load average: on a machine shared with other busy processes the CPU time is the steadier
measure. Last, the uniforms alone: one step's numbers for every row, each way.

    OMP_NUM_THREADS=2 python benchmarks/bench_seeded.py --model HuggingFaceTB/SmolLM2-135M-Instruct --new-tokens 16,64
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import timeit

import torch
from common import machine, table

from genrl_swarm.core import ActSeed, Task
from genrl_swarm.paradigms.lm.policy import LMPolicy
from genrl_swarm.paradigms.lm.seeding import Uniforms


class TorchRand:
    """The unseeded source: ``torch.rand`` from one generator, as the sampler drew before."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def at(self, rows: torch.Tensor, step: int) -> torch.Tensor:
        return torch.rand((len(rows), 1), generator=self.generator, dtype=torch.float64, device=rows.device)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--new-tokens", default="16,64")
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args()
    print(machine(), f"| OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} | load {os.getloadavg()[0]:.2f}")
    policy = LMPolicy(a.model, {"num_generations": a.generations})
    policy.eos_ids = [policy.vocab_size]  # never drawn: every row runs to the token limit in both arms
    inputs = [Task.create(f"Calculate {i} * {i + 3}.").input(0) for i in range(a.prompts)]
    prompts = [policy.prompt_ids(i) for i in inputs]
    rand = TorchRand(0)
    rows = []
    for new in (int(n) for n in a.new_tokens.split(",")):
        policy.sampling.max_new_tokens = new
        times: dict[str, list[float]] = {"torch.rand": [], "seeded": []}
        cpu: dict[str, list[float]] = {"torch.rand": [], "seeded": []}
        for r in range(a.repeats + 1):  # the first pass warms both arms up (packing, heap) and is dropped
            for name in times if r % 2 else reversed(times):
                start, start_cpu = time.perf_counter(), time.process_time()
                if name == "seeded":
                    keys = Uniforms.of(ActSeed(b"bench", r, "peer"), [i.digest for i in inputs], a.generations)
                    out = policy.generate(prompts, a.generations, uniforms=keys)
                else:
                    out = policy.generate(prompts, a.generations, uniforms=rand)  # type: ignore[arg-type]
                elapsed, elapsed_cpu = time.perf_counter() - start, time.process_time() - start_cpu
                assert int(out.lengths.sum()) == len(prompts) * a.generations * new
                if r:
                    times[name].append(elapsed)
                    cpu[name].append(elapsed_cpu)
        for what, measured in (("wall", times), ("cpu", cpu)):
            ratios = [s / t for s, t in zip(measured["seeded"], measured["torch.rand"], strict=True)]
            old, seeded = statistics.median(measured["torch.rand"]), statistics.median(measured["seeded"])
            rows.append([new, what, old * 1e3, seeded * 1e3, f"{statistics.median(ratios):.3f}", f"{min(ratios):.3f}-{max(ratios):.3f}"])
    print(f"load after {os.getloadavg()[0]:.2f}; {a.repeats} alternating calls per arm, {len(prompts) * a.generations} rows")
    print(table(["new tokens", "time", "torch.rand ms", "seeded ms", "seeded / torch.rand (median of pairs)", "range"], rows))
    live = torch.arange(len(prompts) * a.generations)
    keys = Uniforms.of(ActSeed(b"bench", 0, "peer"), [i.digest for i in inputs], a.generations)
    per_step = {"torch.rand": lambda: rand.at(live, 0), "seeded": lambda: keys.at(live, 0)}
    cost = {k: min(timeit.repeat(f, number=200, repeat=5)) / 200 * 1e6 for k, f in per_step.items()}
    derive = (
        min(timeit.repeat(lambda: Uniforms.of(ActSeed(b"bench", 0, "peer"), [i.digest for i in inputs], a.generations), number=50, repeat=5)) / 50
    )
    print(
        f"one step's uniforms for {len(live)} rows: torch.rand {cost['torch.rand']:.1f} us, seeded {cost['seeded']:.1f} us; the call's keys {derive * 1e6:.0f} us"
    )


if __name__ == "__main__":
    main()
