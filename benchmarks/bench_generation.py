"""Rollout generation speed against this machine's compute limit, one sampler lever at a time.

The limit: a generated token costs one forward of the model, 2 x (weights of every matmul,
head included) FLOPs (SmolLM2: ~0.27 GFLOP); this machine's dense matmul rate for the dtype,
measured at the start of the run (``matmul_gflops``, the best of a few sizes at 1 and at the
default thread count, at the start and after every round, keeping the best: on a shared machine
the limit is the least-loaded rate seen, the harder target), divided by that
is the most tokens/s the dtype allows. Each row is one arm; the arms are run interleaved, each
repeat a round that starts at the next arm, so load from other processes and the probe's
after-effects hit them alike; the median is reported, with the load average before and after.

Arms (``--arms``, comma-separated; all by default):
- ``lean-dynamic``: the lean sampler on the model's forward with a DynamicCache (before).
- ``lean-static``: the same loop on the preallocated KV buffer of ``lm.decoder``.
- ``lean-static-compiled``: its decode step through ``torch.compile`` (compile time reported).
- ``lean-static-1thread``: lean-static with ``sampling.threads=1``.
- ``lean-static-unpacked``: lean-static with ``sampling.pack=false`` (bf16: the modules' own
  matmuls instead of fused, oneDNN-packed weights; fp32 is never packed, so the same as lean-static).
- ``lean-static-repack``: lean-static packing the weights again on every call, as in a training
  round (lean-static packs once: its weights never change here, as within a round's evaluations).
- ``hf``: HF ``generate`` batched (``num_return_sequences``), the baseline.
- ``loop``: upstream's loop of one ``generate`` per generation (slow; off unless asked).
each in every ``--dtypes`` (float32, bfloat16) and at every ``--batches`` (rows = prompts x 8).

    python benchmarks/bench_generation.py --model HuggingFaceTB/SmolLM2-135M-Instruct --batches 32,64,128
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from common import machine, matmul_gflops, table

from genrl_swarm.core import Task
from genrl_swarm.paradigms.lm.packed import PackCache
from genrl_swarm.paradigms.lm.policy import LMPolicy

ARMS: dict[str, dict[str, Any]] = {
    "lean-dynamic": {"sampler": "lean", "kv_cache": "dynamic"},
    "lean-static": {"sampler": "lean", "kv_cache": "static"},
    "lean-static-compiled": {"sampler": "lean", "kv_cache": "static", "compile": True},
    "lean-static-1thread": {"sampler": "lean", "kv_cache": "static", "threads": 1},
    "lean-static-unpacked": {"sampler": "lean", "kv_cache": "static", "pack": False},
    "lean-static-repack": {"sampler": "lean", "kv_cache": "static"},
    "hf": {"sampler": "hf"},
    "loop": {"sampler": "hf"},
}


@dataclass
class Arm:
    """One row of the table: a sampler configuration at a dtype and a batch size."""

    name: str
    dtype: str
    batch: int
    rates: list[float] = field(default_factory=list)
    setup_s: float = 0.0  # warm-up time (includes torch.compile for the compiled arm)


def flops_per_token(model: Any) -> float:
    """2 x the weights of every linear map a token goes through (attention over the cache, norms
    and activations are left out: under 3% at these lengths)."""
    return 2.0 * sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def probe(dtype: str, threads: int) -> float:
    """The best matmul rate of a few sizes at ``threads`` (on a busy machine one thread can beat two)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return max(matmul_gflops(dtype, size) for size in (1024, 2048))
    finally:
        torch.set_num_threads(saved)


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


def mismatch(model: str, prompts: int, generations: int, max_new_tokens: int) -> None:
    """bf16 sampler log-probs against what the fp32 learner computes for the same tokens."""
    print(machine())
    policy = LMPolicy(model, {"num_generations": generations, "max_new_tokens": max_new_tokens, "dtype": "bfloat16", "threads": 1}, seed=3)
    bodies = policy.rollouts([Task.create(f"Calculate {i} * {i + 3}.").input(0) for i in range(prompts)])
    diffs = []
    for body in bodies:
        for s in body.samples:
            seq = torch.tensor([[*body.prompt_ids, *s.completion_ids]])
            with torch.inference_mode():
                logp = torch.log_softmax(policy.model(input_ids=seq).logits[0, len(body.prompt_ids) - 1 : -1].double(), -1)
            fp32 = logp.gather(-1, torch.tensor(s.completion_ids)[:, None]).squeeze(-1)
            diffs.append(fp32 - torch.tensor(s.logprobs, dtype=torch.float64))
    d = torch.cat(diffs)
    w = d.exp()  # importance weight pi_fp32 / mu_bf16 per token
    print(f"model {model}: {len(d)} sampled tokens, temperature 1, top_p 1; d = fp32 log-prob - bf16 behaviour log-prob")
    print(table(["statistic", "value"], [
        ["mean |d|", float(d.abs().mean())], ["median |d|", float(d.abs().median())],
        ["p99 |d|", float(d.abs().quantile(0.99))], ["max |d|", float(d.abs().max())], ["mean d", float(d.mean())],
        ["importance weight mean", float(w.mean())], ["weight min", float(w.min())], ["weight max", float(w.max())],
        ["share of weights outside [0.8, 1.25]", float(((w < 0.8) | (w > 1.25)).double().mean())],
    ]))  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--batches", default="64", help="rows per call, comma-separated (multiples of --generations)")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--arms", default="lean-dynamic,lean-static,lean-static-1thread,hf")
    p.add_argument("--mismatch", type=int, default=0, help="only measure bf16-vs-fp32 log-probs on this many prompts")
    a = p.parse_args()
    if a.mismatch:
        return mismatch(a.model, a.mismatch, a.generations, a.max_new_tokens)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    print(machine())
    print(f"load average (1/5 min) at start: {load()}")
    gflops = {d: max(probe(d, t) for t in {threads, 1}) for d in a.dtypes.split(",")}
    policy = LMPolicy(a.model, {"num_generations": a.generations, "max_new_tokens": a.max_new_tokens})
    per_token = flops_per_token(policy.model)
    limit = {d: g * 1e9 / per_token for d, g in gflops.items()}
    for d in gflops:
        print(f"limit {d} at start: matmul {gflops[d]:.0f} GFLOP/s / {per_token / 1e9:.3f} GFLOP per token = {limit[d]:,.0f} tokens/s")
    base = policy.sampling
    prompts_all = [
        policy.prompt_ids(Task.create(f"Calculate {i} * {i + 3}.").input(0))
        for i in range(max(int(b) for b in a.batches.split(",")) // a.generations)
    ]

    def run(arm: Arm) -> int:
        policy.sampling = replace(base, dtype=arm.dtype, **dict(ARMS[arm.name].items()))
        prompts = prompts_all[: arm.batch // a.generations]
        if arm.name == "lean-static-repack":
            policy._packs = PackCache()
        if arm.name == "loop":
            return sum(int(policy.generate(prompts, 1).lengths.sum()) for _ in range(a.generations))
        return int(policy.generate(prompts, a.generations).lengths.sum())  # generated tokens, EOS included

    arms = [Arm(n, d, int(b)) for b in a.batches.split(",") for d in a.dtypes.split(",") for n in a.arms.split(",")]
    for arm in arms:  # warm-up on one prompt: the bf16 copy, compilation, allocator
        start = time.perf_counter()
        run(replace(arm, batch=a.generations))
        arm.setup_s = time.perf_counter() - start
    timed: Callable[[Arm], float] = lambda arm: (lambda s, n: n / (time.perf_counter() - s))(time.perf_counter(), run(arm))  # noqa: E731
    for r in range(a.repeats):
        # Each round starts at another arm: the one right after the matmul probe runs on cores
        # that may still be at a lower clock (AMX/AVX-512 frequency licences), so a fixed order
        # would bias the first arm.
        for arm in arms[r % len(arms) :] + arms[: r % len(arms)]:
            arm.rates.append(timed(arm))
        for d in gflops:  # the limit too is re-measured between rounds; the best rate seen counts
            gflops[d] = max(gflops[d], probe(d, threads), probe(d, 1))
    limit = {d: g * 1e9 / per_token for d, g in gflops.items()}
    print(f"load average (1/5 min) at end: {load()}")
    for d in gflops:
        print(f"limit {d} (best probe of the run): {gflops[d]:.0f} GFLOP/s = {limit[d]:,.0f} tokens/s")
    print(f"model {a.model}, rows = prompts x {a.generations} generations, {a.max_new_tokens} new tokens, median of {a.repeats}")
    rows = []
    for arm in arms:
        rate = statistics.median(arm.rates)
        ref = (
            next(x for x in arms if x.name == "lean-dynamic" and x.batch == arm.batch and x.dtype == "float32")
            if any(x.name == "lean-dynamic" for x in arms)
            else arm
        )
        rows.append(
            [
                arm.batch,
                arm.dtype,
                arm.name,
                rate,
                f"{100 * rate / limit[arm.dtype]:.1f}%",
                f"{rate / statistics.median(ref.rates):.2f}x",
                f"{arm.setup_s:.1f}",
            ]
        )
    print(table(["batch", "dtype", "arm", "tokens/s", "% of limit", "vs fp32 lean-dynamic", "warm-up s"], rows))


if __name__ == "__main__":
    main()
