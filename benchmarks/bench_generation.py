"""Rollout generation: our lean sampler vs HF ``generate`` batched vs the upstream loop.

- lean (ours): all prompts x num_generations in one call, each prompt prefilled once and its KV
  cache repeated, finished rows dropped (genrl_swarm.lm.sampling).
- hf batched: one ``model.generate(num_return_sequences=G)`` call.
- loop (upstream genrl): for each of num_generations, one ``generate`` over the prompts.
Tokens/s counts generated tokens (each row up to and including its EOS); arms interleaved,
several repeats, median reported.

    python benchmarks/bench_generation.py [--model tiny-random|HuggingFaceTB/SmolLM2-135M-Instruct]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import machine, table

from genrl_swarm.core import Task
from genrl_swarm.lm.policy import LMPolicy


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    torch.manual_seed(0)
    policy = LMPolicy(a.model, {"num_generations": a.generations, "max_new_tokens": a.max_new_tokens})
    prompts = [policy.prompt_ids(Task.create(f"Calculate {i} * {i + 3}.").input(0)) for i in range(a.prompts)]

    def run(sampler: str, n: int) -> int:
        policy.sampling.sampler = sampler  # type: ignore[assignment]
        return int(policy.generate(prompts, n).lengths.sum())  # generated tokens, EOS included

    arms = {
        "lean sampler (ours, default)": lambda: run("lean", a.generations),
        "hf generate, batched": lambda: run("hf", a.generations),
        "loop per generation (upstream)": lambda: sum(run("hf", 1) for _ in range(a.generations)),
    }
    for fn in arms.values():
        fn()  # warm-up
    rates: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(a.repeats):
        for name, fn in arms.items():
            start = time.perf_counter()
            n = fn()
            rates[name].append(n / (time.perf_counter() - start))
    med = {k: statistics.median(v) for k, v in rates.items()}
    base = med["loop per generation (upstream)"]
    print(machine())
    print(f"model {a.model}, {a.prompts} prompts x {a.generations} generations x {a.max_new_tokens} new tokens, median of {a.repeats}")
    print(table(["approach", "tokens/s", "ratio"], [[k, v, f"{v / base:.2f}x"] for k, v in med.items()]))


if __name__ == "__main__":
    main()
