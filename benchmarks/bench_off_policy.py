"""Off-policy correction on the tiny model: none vs tis vs decoupled, when the rollouts were
sampled by another policy than the one being trained.

Behaviour policies (what a swarm peer's rollouts look like to this learner):
- ``stale``: a copy of the learner's weights refreshed only every ``--lag`` updates;
- ``hot``: fresh weights but sampled at ``--hot-temperature`` (the learner's policy is T = 1).
The reward is synthetic and learnable in a few dozen steps: the share of completion tokens
whose text contains a digit (~0.3 for the untrained tiny model). Two epochs per batch, so the
clip fraction is measured against the proximal policy. The same seeds for every mode;
numbers are means over seeds (the weight max is the max).

Columns: clip fraction, k3 KL(behaviour || proximal), raw importance weight pi_prox/mu (mean,
max, share above the cap), the mean reward of the behaviour samples per window of steps (the
reward curve), and the learner's own reward at the end (T = 1, ``--eval-prompts`` x G samples).

    python benchmarks/bench_off_policy.py [--steps 30] [--lag 8] [--hot-temperature 2.0] [--seeds 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from common import machine, mean_sd, table

from genrl_swarm.core import GameState, Rollout, RoundRewards, ScoredRollout, StageInput, Task, TokenRollout, Weights
from genrl_swarm.paradigms.lm.learner import GRPOLearner
from genrl_swarm.paradigms.lm.policy import LMPolicy

METRICS = ("train/clip_frac", "train/behaviour_kl", "train/is_weight_mean", "train/is_weight_max", "train/is_truncated_frac")


class DigitReward:
    """Share of a completion's tokens whose text contains a digit, read from the ids."""

    def __init__(self, policy: LMPolicy) -> None:
        vocab = policy.tokenizer.convert_ids_to_tokens(list(range(len(policy.tokenizer))))
        self.digit = {i for i, t in enumerate(vocab) if any(c.isdigit() for c in t)}

    def __call__(self, body: TokenRollout) -> tuple[float, ...]:
        return tuple(sum(i in self.digit for i in s.completion_ids) / len(s.completion_ids) for s in body.samples)


def run(a: argparse.Namespace, mode: str, scenario: str, seed: int) -> dict[str, Any]:
    sampling = {"num_generations": a.generations, "max_new_tokens": a.max_new_tokens}
    learner_policy = LMPolicy(a.model, sampling, seed=seed)
    hot = scenario == "hot"
    actor = LMPolicy(a.model, sampling | {"temperature": a.hot_temperature if hot else 1.0}, seed=seed + 1)
    learner = GRPOLearner(learner_policy, {"learning_rate": a.lr, "num_epochs": 2, "off_policy": mode, "is_cap": a.is_cap,
                                           "micro_batch_size": a.prompts * a.generations, "num_external": a.prompts}, seed=seed)  # fmt: skip
    reward = DigitReward(learner_policy)
    inputs: list[StageInput] = [Task.create(f"Calculate {i} + {3 * i}.").input(0) for i in range(a.prompts)]
    lag = 1 if hot else a.lag
    curve: list[float] = []
    seen: dict[str, list[float]] = {k: [] for k in METRICS}
    for step in range(a.steps):
        if step % lag == 0:  # the behaviour policy catches up with the learner (a copy, not the module)
            actor.load_weights(Weights(learner.version, {k: v.clone() for k, v in learner.model.state_dict().items()}))
        bodies = actor.rollouts(inputs)
        scored = tuple(ScoredRollout(Rollout("peer", step, 0, b), reward(b)) for b in bodies)
        curve.append(statistics.mean(r for s in scored for r in s.rewards))
        metrics = learner.train(GameState(step, "me"), RoundRewards(step, scored))
        learner_policy.load_weights(learner.weights())
        for k in METRICS:
            if k in metrics:
                seen[k].append(metrics[k])
    eval_inputs = [Task.create(f"Calculate {i} * 7.").input(0) for i in range(a.eval_prompts)]
    final = statistics.mean(r for b in learner_policy.rollouts(eval_inputs) for r in reward(b))
    window = max(1, a.steps // 3)
    stats = {k: (max(v) if k.endswith("max") else statistics.mean(v)) if v else float("nan") for k, v in seen.items()}
    return stats | {"curve": [statistics.mean(curve[i : i + window]) for i in range(0, a.steps, window)][:3], "final": final}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=12)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--lag", type=int, default=8, help="stale scenario: updates between behaviour refreshes")
    p.add_argument("--hot-temperature", type=float, default=2.0)
    p.add_argument("--is-cap", type=float, default=2.0)
    p.add_argument("--eval-prompts", type=int, default=16)
    p.add_argument("--seeds", type=int, default=2)
    a = p.parse_args()
    start = time.perf_counter()
    rows = []
    for scenario in ("stale", "hot"):
        for mode in ("none", "tis", "decoupled"):
            runs = []
            for seed in range(a.seeds):
                torch.manual_seed(seed)
                runs.append(run(a, mode, scenario, seed))
            stats = [max(r[k] for r in runs) if k.endswith("max") else statistics.mean(r[k] for r in runs) for k in METRICS]
            curve = " → ".join(f"{statistics.mean(r['curve'][i] for r in runs):.2f}" for i in range(len(runs[0]["curve"])))
            rows.append([scenario, mode, *stats, curve, mean_sd([r["final"] for r in runs])])
    print(machine())
    print(f"model {a.model}, {a.steps} steps x {a.prompts} prompts x {a.generations} samples x {a.max_new_tokens} tokens, "
          f"lr {a.lr}, 2 epochs, is_cap {a.is_cap}; stale: behaviour refreshed every {a.lag} updates; "
          f"hot: behaviour at T={a.hot_temperature}; mean of {a.seeds} seeds; {time.perf_counter() - start:.0f} s")  # fmt: skip
    headers = ["behaviour", "off_policy", "clip frac", "behaviour KL", "IS w mean", "IS w max", "w > cap",
               "reward (thirds of the run)", "learner reward (mean ± sd)"]  # fmt: skip
    print(table(headers, rows))


if __name__ == "__main__":
    main()
