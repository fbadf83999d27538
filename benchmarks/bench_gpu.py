"""A short sampler and GRPO benchmark on one device: the numbers ``scripts/gpu_check.sh`` reports.

Why its own script: the CPU benchmarks (``bench_generation.py``, ``bench_grpo_vs_trl.py``) probe
this machine's matmul rate, threads and oneDNN packing, none of which means anything on a GPU,
and they run for many minutes. This one measures, in well under two minutes, what a GPU changes:
the lean sampler's tokens/s in fp32 and bf16 (and HF ``generate`` beside it), and one GRPO step
(generation + update) in completions/s. Each arm: one warm-up, then the median of ``--repeats``,
timed after ``torch.cuda.synchronize`` on CUDA.

    python benchmarks/bench_gpu.py [--device cuda] [--model tiny-random] [--prompts 8 --generations 8 --max-new-tokens 64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import common  # noqa: F401 - offline hub, quiet warnings
import torch

from genrl_swarm.core import GameState, Rollout, RoundRewards, ScoredRollout, Task
from genrl_swarm.paradigms.lm.learner import GRPOLearner
from genrl_swarm.paradigms.lm.policy import LMPolicy

#: The sampler arms: (name, sampling settings over the shared ones).
SAMPLERS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("sampler lean fp32", {"sampler": "lean", "dtype": "float32"}),
    ("sampler lean bf16", {"sampler": "lean", "dtype": "bfloat16"}),
    ("sampler hf generate fp32", {"sampler": "hf", "dtype": "float32"}),
)


@dataclass(frozen=True)
class Row:
    """One arm's result: ``rate`` in ``unit`` (median), and what it was measured on."""

    arm: str
    rate: float
    unit: str
    detail: str


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(call: Callable[[], Any], device: torch.device, repeats: int) -> tuple[list[float], Any]:
    """Seconds of each of ``repeats`` calls after one warm-up, and the last call's result."""
    result = call()
    seconds = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        result = call()
        sync(device)
        seconds.append(time.perf_counter() - start)
    return seconds, result


def reward(text: str) -> float:
    """Deterministic and varied, so groups have an advantage to train on."""
    return float(sum(map(ord, text)) % 3) / 2


def sampler_rows(a: argparse.Namespace, inputs: list[Any]) -> list[Row]:
    rows = []
    for name, settings in SAMPLERS:
        policy = LMPolicy(a.model, {"num_generations": a.generations, "max_new_tokens": a.max_new_tokens} | settings, device=a.device, seed=0)
        seconds, bodies = timed(lambda p=policy: p.rollouts(inputs), policy.device, a.repeats)  # type: ignore[misc]
        tokens = sum(len(s.completion_ids) for body in bodies for s in body.samples)
        rate = tokens / statistics.median(seconds)
        rows.append(Row(name, rate, "tokens/s", f"{len(inputs)}x{a.generations} rows, {tokens} tokens, {policy.device}"))
    return rows


def grpo_row(a: argparse.Namespace, inputs: list[Any]) -> Row:
    """One game step: sample, score the texts, update, hand the weights back (the round's work)."""
    policy = LMPolicy(a.model, {"num_generations": a.generations, "max_new_tokens": a.max_new_tokens}, device=a.device, seed=0)
    learner = GRPOLearner(policy, {"learning_rate": 1e-5, "micro_batch_size": len(inputs) * a.generations})
    steps = iter(range(a.repeats + 1))
    split: list[tuple[float, float]] = []

    def step() -> None:
        n = next(steps)
        start = time.perf_counter()
        scored = [ScoredRollout(Rollout("me", n, 0, b, t), tuple(map(reward, t))) for b in policy.rollouts(inputs) for t in [policy.texts(b)]]
        sync(policy.device)
        mid = time.perf_counter()
        learner.train(GameState(n, "me"), RoundRewards(n, tuple(scored)))
        policy.load_weights(learner.weights())
        sync(policy.device)
        split.append((mid - start, time.perf_counter() - mid))

    seconds, _ = timed(step, policy.device, a.repeats)
    gen, update = (statistics.median(s[i] for s in split[1:]) for i in (0, 1))
    rate = len(inputs) * a.generations / statistics.median(seconds)
    return Row("GRPO step (generate + update)", rate, "completions/s", f"generate {gen:.3f} s, update {update:.3f} s, {policy.device}")


def run(a: argparse.Namespace) -> list[Row]:
    inputs = [Task.create(f"What is {i} + {i + 7}? Answer with the number.").input(0) for i in range(a.prompts)]
    return [*sampler_rows(a, inputs), grpo_row(a, inputs)]


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true", help="one JSON object per row (for scripts/gpu_check.py)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = arguments(argv)
    for row in run(a):
        print(json.dumps(asdict(row)) if a.json else f"{row.arm}: {row.rate:,.1f} {row.unit} ({row.detail})", flush=True)


if __name__ == "__main__":
    main()
