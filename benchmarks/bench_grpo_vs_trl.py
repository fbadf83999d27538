"""GRPO training throughput (completions/s, generation + update) vs TRL's GRPOTrainer at its best.

Same model, same prompts, same num_generations, completion length, learning rate, beta=0,
one update per batch, rewards from the same deterministic function. Three tables, all arms
measured in this one run, interleaved where they can be (the machine is shared):

1. **Levers** (update only): one fixed batch of rollouts, ``GRPOLearner.train`` timed under each
   ``GRPOConfig`` speed switch (learning rate 0, so every repetition does the same work), with
   the FLOPs the arm actually executes as a percentage of this machine's matmul rate for its
   dtype (``common.matmul_gflops``).
2. **TRL arms**: fp32 and bf16 (``bf16=True``: autocast over fp32 weights), gradient
   checkpointing off (TRL's default is on; off is faster when memory allows), and a pure bf16
   model (weights and AdamW state in bf16: fastest, but not the same optimiser), that model with
   TRL's ``cache_implementation="static"`` generation cache. Liger kernels
   need Triton (a GPU), so they are not an arm here.
3. **End to end**: our arms and TRL's, each with its generation / update split.

    python benchmarks/bench_grpo_vs_trl.py [--model tiny-random] [--steps 2] [--prompts 8 --generations 8 --max-new-tokens 64]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from common import machine, matmul_gflops, table

from genrl_swarm.core import GameState, Rollout, RoundRewards, ScoredRollout, Task
from genrl_swarm.paradigms.lm.learner import GRPOLearner
from genrl_swarm.paradigms.lm.policy import DEFAULT_SYSTEM_PROMPT, LMPolicy
from genrl_swarm.paradigms.lm.prefix import PrefixBatch

#: The update levers: (row, GRPOConfig overrides). "main" is the learner before this work. On the
#: per-sequence path ``bucket`` only sorts rows before cutting micro-batches: a no-op for PLAIN's
#: one micro-batch of 64 rows, so PLAIN has no lever on.
PLAIN = {"shared_prefix": False, "bucket": True, "fused_logprobs": False, "precision": "float32"}
ALL = {"shared_prefix": True, "bucket": True, "fused_logprobs": True, "precision": "bfloat16"}
#: The end-to-end arms' levers: bf16 autocast only where this CPU has native bf16 (elsewhere it
#: is emulated: 1.3 GFLOP/s on a Zen 3 EPYC, 2026-11-27), as the learner's default does.
BEST = ALL | {"precision": "auto"}
LEVERS: list[tuple[str, dict[str, Any]]] = [
    ("plain per-sequence fp32 (main)", PLAIN),
    ("+ shared prefix", PLAIN | {"shared_prefix": True, "bucket": False}),
    ("+ length buckets", PLAIN | {"shared_prefix": True}),
    ("+ fused log-prob gather", PLAIN | {"shared_prefix": True, "fused_logprobs": True}),
    ("+ bf16 autocast (all levers)", ALL),
    ("all but shared prefix", ALL | {"shared_prefix": False}),
    ("all but buckets", ALL | {"bucket": False}),
    ("all but fused gather", ALL | {"fused_logprobs": False}),
]


def reward(completion: str) -> float:
    """Deterministic and varied, so few groups are degenerate in either arm."""
    return float(sum(map(ord, completion)) % 3) / 2


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


@dataclass
class Split:
    """Seconds per measured step: generation, update."""

    gen: list[float] = field(default_factory=list)
    update: list[float] = field(default_factory=list)


# --------------------------------------------------------------------------- ours
def make_policy(a: argparse.Namespace, sampler: Mapping[str, Any] | None = None) -> LMPolicy:
    torch.manual_seed(0)
    return LMPolicy(a.model, {"num_generations": a.generations, "max_new_tokens": a.max_new_tokens, **(sampler or {})})


def scored_round(policy: LMPolicy, inputs: list[Any], step: int) -> RoundRewards:
    scored = []
    for body in policy.rollouts(inputs):
        texts = policy.texts(body)
        scored.append(ScoredRollout(Rollout("me", step, 0, body, texts), tuple(reward(c) for c in texts)))
    return RoundRewards(step, tuple(scored))


def ours(a: argparse.Namespace, questions: list[str], cfg: dict[str, Any], sampler: Mapping[str, Any]) -> Split:
    """One step = the policy samples, this peer scores the decoded texts, the learner updates the
    shared module and the policy takes the new version (what the game loop does per round)."""
    policy = make_policy(a, sampler)
    learner = GRPOLearner(policy, {"learning_rate": 1e-5, "micro_batch_size": a.prompts * a.generations} | cfg)
    inputs = [Task.create(q).input(0) for q in questions]
    split = Split()
    for step in range(a.steps + 1):
        start = time.perf_counter()
        rewards = scored_round(policy, inputs, step)
        mid = time.perf_counter()
        learner.train(GameState(step, "me"), rewards)
        policy.load_weights(learner.weights())
        if step:  # the first step warms up
            split.gen.append(mid - start)
            split.update.append(time.perf_counter() - mid)
    return split


def executed_gflop(learner: GRPOLearner, rewards: RoundRewards) -> tuple[float, float]:
    """(GFLOP executed by one update, fraction of fed positions that are padding), counting the
    linear layers (6 FLOPs per weight per token for forward + backward; the fused head recomputes
    its logits: 8) and leaving attention scores out."""
    model = learner.model
    head = model.get_output_embeddings().weight
    body = sum(p.numel() for n, p in model.named_parameters() if p is not head and "embed" not in n)
    hv = head.numel()
    state = GameState(0, "me")
    samples = learner.samples(state, learner.select(state, rewards))
    body_tokens = head_tokens = real = 0
    for unit in learner.units(samples):
        if isinstance(unit, PrefixBatch):
            body_tokens += unit.prompt_ids.numel()
            real += float(unit.prompt_mask.sum())
            for c in unit.chunks:
                n, w = c.completion_ids.shape
                body_tokens += n * (w - 1)
                real += float(c.completion_mask.sum()) - n
                head_tokens += float(c.completion_mask.sum())
        else:
            body_tokens += unit.input_ids.numel()
            real += float(unit.attention_mask.sum())
            head_tokens += unit.input_ids.shape[0] * (unit.width + 1)
    head_flops = 8 if learner.uses_shared_prefix() and learner.cfg.fused_logprobs else 6
    return (6 * body * body_tokens + head_flops * hv * head_tokens) / 1e9, 1 - real / body_tokens


def levers(a: argparse.Namespace, questions: list[str], limits: dict[str, float]) -> list[list[object]]:
    policy = make_policy(a)
    rewards = scored_round(policy, [Task.create(q).input(0) for q in questions], 0)
    start = copy.deepcopy(policy.model.state_dict())
    chosen = LEVERS[: a.lever_rows]
    make = lambda cfg: GRPOLearner(policy, {"learning_rate": 0.0, "micro_batch_size": a.prompts * a.generations} | cfg)  # noqa: E731
    learners = [make(cfg) for _, cfg in chosen]
    times: list[list[float]] = [[] for _ in chosen]
    for rep in range(a.lever_reps + 1):  # interleaved: load changes hit every arm alike
        for i, (_, cfg) in enumerate(chosen):
            learner = make(cfg)  # fresh each time: eight AdamW states of a 135M model do not fit in memory
            t = time.perf_counter()
            learner.train(GameState(0, "me"), rewards)
            if rep:
                times[i].append(time.perf_counter() - t)
            policy.model.load_state_dict(start)
            del learner
    rows = []
    base = min(times[0])
    for (name, cfg), learner, ts in zip(chosen, learners, times, strict=True):
        best = min(ts)
        gflop, pad = executed_gflop(learner, rewards)
        dtype = "bfloat16" if cfg["precision"] == "bfloat16" else "float32"
        pct = 100 * gflop / best / limits[dtype]
        rows.append(
            [
                name,
                best,
                f"{base / best:.2f}x",
                a.prompts * a.generations / best,
                f"{100 * pad:.1f}%",
                gflop,
                f"{pct:.0f}% of {'bf16' if dtype == 'bfloat16' else 'fp32'}",
            ]
        )
    return rows


# --------------------------------------------------------------------------- TRL
def trl(a: argparse.Namespace, questions: list[str], bf16: bool, checkpointing: bool, model_dtype: str = "float32",
        cache: str | None = None) -> Split:  # fmt: skip
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig
    from trl import GRPOTrainer as TRLGRPOTrainer

    from genrl_swarm.paradigms.lm.models import load_model

    torch.manual_seed(0)
    model, tokenizer = load_model(a.model, dtype=model_dtype)
    prompts = [[{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, {"role": "user", "content": q}] for q in questions]
    data = Dataset.from_dict({"prompt": prompts * (a.steps + 2)})
    marks: list[float] = []
    calls: list[tuple[float, float]] = []  # (start, seconds) of each generation call

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *args: object, **kwargs: object) -> None:
            marks.append(time.perf_counter())

    def rewards(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [reward(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out, per_device_train_batch_size=a.prompts * a.generations, num_generations=a.generations,
            max_completion_length=a.max_new_tokens, learning_rate=1e-5, beta=0.0, num_iterations=1,
            max_steps=a.steps + 1, logging_steps=10_000, report_to=[], save_strategy="no", use_cpu=True,
            bf16=bf16, gradient_checkpointing=checkpointing, temperature=1.0, shuffle_dataset=False,
            gradient_accumulation_steps=1, cache_implementation=cache,
        )  # fmt: skip
        trainer = TRLGRPOTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=data, reward_funcs=rewards, callbacks=[Clock()])
        generate = trainer._generate_single_turn

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return generate(*args, **kwargs)
            finally:
                calls.append((t, time.perf_counter() - t))

        trainer._generate_single_turn = timed
        trainer.train()
    split = Split()  # step i runs between marks[i - 1] and marks[i]; step 0 warms up
    for lo, hi in zip(marks, marks[1:]):
        split.gen.append(sum(d for t, d in calls if lo <= t < hi))
        split.update.append(hi - lo - split.gen[-1])
    return split


# --------------------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--steps", type=int, default=3, help="measured steps per end-to-end arm (after 1 warm-up)")
    p.add_argument("--lever-reps", type=int, default=3, help="measured updates per lever (after 1 warm-up; best is kept)")
    p.add_argument("--lever-rows", type=int, default=len(LEVERS), help="measure only the first N lever rows")
    p.add_argument("--skip", default="", help="comma list of sections to skip: levers,trl,ours")
    p.add_argument("--arms", default="", help="comma list of substrings: run only the end-to-end arms whose name has one")
    p.add_argument("--repeats", type=int, default=1, help="run every end-to-end arm this many times, the order rotating")
    p.add_argument("--bf16-anyway", action="store_true", help="run the bf16 arms where bf16 matmuls are slower than fp32 ones")
    a = p.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    questions = [f"Calculate {i} + {2 * i}." for i in range(a.prompts)]
    completions = a.prompts * a.generations
    limits = {d: matmul_gflops(d) for d in ("float32", "bfloat16")}
    print(machine())
    print(f"matmul limit here: fp32 {limits['float32']:.0f} GFLOP/s, bf16 {limits['bfloat16']:.0f} GFLOP/s | {load()}")
    print(f"model {a.model}, {a.prompts} prompts x {a.generations} generations x {a.max_new_tokens} tokens")
    if "levers" not in skip and a.lever_rows > 0:
        rows = levers(a, questions, limits)
        print(f"\nUpdate levers (one fixed batch, best of {a.lever_reps}; {load()})")
        print(table(["learner", "update s", "speedup", "completions/s", "padding", "GFLOP", "of matmul limit"], rows))
    runs: dict[str, Callable[[], Split]] = {
        "TRL fp32, grad ckpt on (TRL default)": lambda: trl(a, questions, bf16=False, checkpointing=True),
        "TRL fp32, grad ckpt off": lambda: trl(a, questions, bf16=False, checkpointing=False),
        "TRL bf16=True (autocast), grad ckpt off": lambda: trl(a, questions, bf16=True, checkpointing=False),
        "TRL pure bf16 model, grad ckpt off": lambda: trl(a, questions, bf16=True, checkpointing=False, model_dtype="bfloat16"),
        "TRL fp32, static KV cache, grad ckpt off": lambda: trl(a, questions, bf16=False, checkpointing=False, cache="static"),
        "TRL pure bf16 model, static KV cache, grad ckpt off": lambda: trl(
            a, questions, bf16=True, checkpointing=False, model_dtype="bfloat16", cache="static"
        ),
        "ours: main learner (plain fp32)": lambda: ours(a, questions, PLAIN, {"kv_cache": "dynamic"}),
        "ours: all levers, fp32 sampler": lambda: ours(a, questions, BEST, {"kv_cache": "dynamic"}),
        "ours: all levers, fp32 static-KV sampler": lambda: ours(a, questions, BEST, {"kv_cache": "static"}),
        "ours: all levers, bf16 sampler": lambda: ours(a, questions, BEST, {"dtype": "bfloat16", "kv_cache": "dynamic"}),
        "ours: all levers, bf16 static-KV sampler, 1 sampling thread": lambda: ours(
            a, questions, BEST, {"dtype": "bfloat16", "kv_cache": "static", "threads": 1}
        ),
    }
    chosen = [k for k in runs if (not a.arms or any(w in k for w in a.arms.split(",")))
              and not ("trl" in skip and k.startswith("TRL")) and not ("ours" in skip and k.startswith("ours"))]  # fmt: skip
    if limits["bfloat16"] < limits["float32"] and not a.bf16_anyway:  # emulated bf16 (no AVX512-BF16/AMX)
        dropped = [k for k in chosen if "bf16" in k]
        chosen = [k for k in chosen if k not in dropped]
        print(f"bf16 matmuls are emulated here ({limits['bfloat16']:.1f} GFLOP/s): not run (--bf16-anyway runs them): {', '.join(dropped)}")
    rate = lambda s: completions / (statistics.mean(s.gen) + statistics.mean(s.update))  # noqa: E731
    splits: dict[str, list[Split]] = {k: [] for k in chosen}
    for rep in range(a.repeats):  # every arm once per repeat, the order rotating: load drifts hit all arms alike
        for k in chosen[rep % len(chosen) :] + chosen[: rep % len(chosen)]:
            splits[k].append(runs[k]())
            print(f"  repeat {rep + 1}/{a.repeats}: {k}: {rate(splits[k][-1]):.3g} completions/s ({load()})", flush=True)
    if splits:
        rates = {k: [rate(s) for s in v] for k, v in splits.items()}
        base = max((statistics.median(v) for k, v in rates.items() if k.startswith("TRL")), default=None)
        rows = []
        for k, v in splits.items():
            gen, update = [g for s in v for g in s.gen], [u for s in v for u in s.update]
            mid = statistics.median(rates[k])
            rows.append(
                [
                    k,
                    mid,
                    f"{min(rates[k]):.3g}-{max(rates[k]):.3g}",
                    statistics.mean(gen),
                    statistics.mean(update),
                    f"{mid / base:.2f}x" if base else "",
                ]
            )
        print(f"\nEnd to end, {a.steps} measured steps after 1 warm-up, {a.repeats} repeat(s) ({load()}); median, range and ratio to TRL's best arm")
        print(table(["arm", "completions/s", "range", "gen s/step", "update s/step", "vs TRL best"], rows))


if __name__ == "__main__":
    main()
