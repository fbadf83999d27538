"""Learning with and without the swarm: 4 peers sharing (SAPO: num_local = num_external) vs 4
isolated peers at equal compute (each trains on the same number of rollouts, all its own).

Cumulative reward = the sum over rounds of a peer's mean own reward, averaged over peers;
several seeds, mean ± sd, and the ratio sharing / isolated.

    python benchmarks/bench_sharing.py --model tiny-random --rounds 3 --seeds 2      # CI-sized
    python benchmarks/bench_sharing.py --model HuggingFaceTB/SmolLM2-135M-Instruct --rounds 8 --seeds 2
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from common import machine, mean_sd, table

from genrl_swarm.config import load_recipe
from genrl_swarm.run.launcher import run_recipe


def play(a: argparse.Namespace, seed: int, shared: bool) -> tuple[float, float]:
    """(cumulative reward, mean reward of the last third of rounds), averaged over peers."""
    half = a.tasks // 2
    local, external = (half, half) if shared else (a.tasks, 0)
    with tempfile.TemporaryDirectory() as out:
        cfg = load_recipe("reasoning_gym", [
            f"seed={seed}", f"swarm.num_peers={a.peers}", f"game.max_rounds={a.rounds}", "game.mode=train",
            f"run.dir={out}", "run.console=false", "run.tensorboard=false", "run.plot=false", "run.checkpoint_every=0",
            f"data.datasets=[{a.datasets}]", f"data.tasks_per_round={a.tasks}",
            "+data.dataset_config.basic_arithmetic={max_terms: 2, max_digits: 1}",
            f"policy.model={a.model}", f"policy.sampling.max_new_tokens={a.max_new_tokens}",
            f"policy.sampling.num_generations={a.generations}", f"learner.grpo.learning_rate={a.lr}",
            f"learner.grpo.num_local={local}", f"learner.grpo.num_external={external}",
            f"learner.grpo.off_policy={a.off_policy}",
        ])  # fmt: skip
        summary = run_recipe(cfg)
    tail = max(1, a.rounds // 3)
    cumulative = [sum(r.rewards[peer] for r in rounds) for peer, rounds in summary.results.items()]
    late = [statistics.mean(r.rewards[peer] for r in rounds[-tail:]) for peer, rounds in summary.results.items()]
    return statistics.mean(cumulative), statistics.mean(late)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--peers", type=int, default=4)
    p.add_argument("--tasks", type=int, default=4, help="tasks per round (= rollouts each peer trains on)")
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--datasets", default="basic_arithmetic")
    p.add_argument("--off-policy", default="tis", choices=["none", "tis", "decoupled"])
    a = p.parse_args()
    start = time.perf_counter()
    results: dict[str, list[tuple[float, float]]] = {"sharing": [], "isolated": []}
    rows = []
    for seed in range(a.seeds):
        for name in results:
            cum, late = play(a, seed, name == "sharing")
            results[name].append((cum, late))
            rows.append([name, seed, cum, late])
    print(machine())
    print(f"model {a.model}, {a.peers} peers, {a.rounds} rounds, {a.tasks} tasks x {a.generations} generations, "
          f"datasets {a.datasets}, off_policy {a.off_policy}, {time.perf_counter() - start:.0f} s")  # fmt: skip
    print(table(["arm", "seed", "cumulative reward", f"mean reward, last {max(1, a.rounds // 3)} rounds"], rows))
    summary = [[name, mean_sd([c for c, _ in v]), mean_sd([x for _, x in v])] for name, v in results.items()]
    print(table(["arm", "cumulative (mean ± sd)", "late reward (mean ± sd)"], summary))
    iso = statistics.mean(c for c, _ in results["isolated"])
    shared = statistics.mean(c for c, _ in results["sharing"])
    print(f"sharing / isolated cumulative reward: {shared / iso:.2f}x" if iso > 0 else "isolated reward is 0: no ratio")


if __name__ == "__main__":
    main()
