"""GRPO training throughput (completions/s, generation + update) vs TRL's GRPOTrainer.

Same model, same prompts, same num_generations, completion length, learning rate, beta=0,
one update per batch; rewards from the same deterministic function. Each arm runs
``--steps`` steps (after one warm-up step) on the same machine in one run.

    python benchmarks/bench_grpo_vs_trl.py [--model tiny-random] [--steps 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import torch
from common import machine, table

from genrl_swarm.core import GameState, RoundRewards, Rollout, ScoredRollout, Task
from genrl_swarm.lm.policy import DEFAULT_SYSTEM_PROMPT, LMPolicy
from genrl_swarm.trainers.grpo import GRPOLearner


def reward(completion: str) -> float:
    """Deterministic and varied, so few groups are degenerate in either arm."""
    return float(sum(map(ord, completion)) % 3) / 2


def ours(a: argparse.Namespace, questions: list[str]) -> float:
    """One step = the policy samples, this peer scores the decoded texts, the learner updates the
    shared module and the policy takes the new version (what the game loop does per round)."""
    torch.manual_seed(0)
    policy = LMPolicy(a.model, {"num_generations": a.generations, "max_new_tokens": a.max_new_tokens})
    learner = GRPOLearner(policy, {"learning_rate": 1e-5, "micro_batch_size": a.prompts * a.generations})
    inputs = [Task.create(q).input(0) for q in questions]
    step_times = []
    for step in range(a.steps + 1):
        start = time.perf_counter()
        scored = []
        for body in policy.rollouts(inputs):
            texts = policy.texts(body)
            scored.append(ScoredRollout(Rollout("me", step, 0, body, texts), tuple(reward(c) for c in texts)))
        learner.train(GameState(step, "me"), RoundRewards(step, tuple(scored)))
        policy.load_weights(learner.weights())
        step_times.append(time.perf_counter() - start)
    return a.steps * a.prompts * a.generations / sum(step_times[1:])


def trl(a: argparse.Namespace, questions: list[str]) -> float:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer as TRLGRPOTrainer

    from genrl_swarm.lm.models import load_model

    torch.manual_seed(0)
    model, tokenizer = load_model(a.model)
    prompts = [[{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, {"role": "user", "content": q}] for q in questions]
    data = Dataset.from_dict({"prompt": prompts * (a.steps + 2)})
    marks: list[float] = []

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
            bf16=False, temperature=1.0, shuffle_dataset=False, gradient_accumulation_steps=1,
        )  # fmt: skip
        trainer = TRLGRPOTrainer(
            model=model, processing_class=tokenizer, args=config, train_dataset=data,
            reward_funcs=rewards,
            callbacks=[Clock()],
        )  # fmt: skip
        trainer.train()
    return a.steps * a.prompts * a.generations / (marks[-1] - marks[0])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--steps", type=int, default=5)
    a = p.parse_args()
    questions = [f"Calculate {i} + {2 * i}." for i in range(a.prompts)]
    rates = {"genrl-swarm LMPolicy + GRPOLearner": ours(a, questions), "TRL GRPOTrainer": trl(a, questions)}
    base = rates["TRL GRPOTrainer"]
    print(machine())
    print(f"model {a.model}, {a.prompts} prompts x {a.generations} generations x {a.max_new_tokens} tokens, {a.steps} timed steps")
    print(table(["trainer", "completions/s", "ratio"], [[k, v, f"{v / base:.2f}x"] for k, v in rates.items()]))


if __name__ == "__main__":
    main()
