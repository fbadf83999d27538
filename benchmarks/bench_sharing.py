"""Learning with and without the swarm, on held-out problems: 4 peers sharing (SAPO: num_local =
num_external) vs 4 isolated peers at equal compute (each generates the same rollouts and trains
on the same number of them, all its own when isolated).

Per arm and seed: greedy held-out accuracy and format rate before training and after the last
round (mean over peers), and the SAPO paper's metric, cumulative training reward (sum over
rounds of a peer's mean own reward, averaged over peers). Mean ± sd over seeds.

    python benchmarks/bench_sharing.py --model tiny-random --rounds 2 --seeds 1 --eval-size 8   # smoke
    python benchmarks/bench_sharing.py                                 # SmolLM2, the README table (2 seeds: ~30 min on 2 loaded cores)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass

from common import machine, mean_sd, table

from genrl_swarm.config import load_recipe
from genrl_swarm.games.reasoning_gym.heldout import HeldOutEval, Score
from genrl_swarm.run.launcher import Checkpointer, build_managers, run_managers


@dataclass(frozen=True)
class Outcome:
    before: Score  # peer 0 before training (every peer starts from the same weights)
    after_accuracy: float  # mean over peers
    after_format: float
    cumulative: float
    seconds: float


def play(a: argparse.Namespace, seed: int, shared: bool) -> Outcome:
    half = a.tasks // 2
    local, external = (half, half) if shared else (a.tasks, 0)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        cfg = load_recipe(a.recipe, [
            f"seed={seed}", f"swarm.num_peers={a.peers}", f"game.max_rounds={a.rounds}", "game.mode=train",
            f"run.dir={out}", "run.console=false", "run.tensorboard=false", "run.plot=false",
            f"data.tasks_per_round={a.tasks}", f"data.eval_size={a.eval_size}",
            f"policy.model={a.model}", f"policy.sampling.max_new_tokens={a.max_new_tokens}",
            f"policy.sampling.num_generations={a.generations}", f"learner.grpo.learning_rate={a.lr}",
            f"learner.grpo.num_local={local}", f"learner.grpo.num_external={external}",
        ])  # fmt: skip
        managers, _ = build_managers(cfg)
        heldout = HeldOutEval(every=0, max_rounds=a.rounds)
        before = heldout.before(managers[0])
        for m in managers:  # no multi-GB checkpoints of a throwaway run; held-out after the last round
            m.hooks.after_round = [h for h in m.hooks.after_round if not isinstance(h, Checkpointer)] + [heldout]
            m.hooks.after_game = []
        results = run_managers(managers)
    after = [rows[-1][1] for rows in heldout.scores.values() if rows[-1][0] == a.rounds]
    if len(after) != a.peers:
        raise RuntimeError(f"held-out scores after round {a.rounds} for {len(after)} of {a.peers} peers")
    cumulative = statistics.mean(sum(r.rewards[peer] for r in rounds) for peer, rounds in results.items())
    return Outcome(before, statistics.mean(s.accuracy for s in after), statistics.mean(s.format for s in after),
                   cumulative, time.perf_counter() - start)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--recipe", default="reasoning_gym/digits")
    p.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--first-seed", type=int, default=0, help="seeds are first-seed .. first-seed + seeds - 1")
    p.add_argument("--peers", type=int, default=4)
    p.add_argument("--tasks", type=int, default=4, help="tasks per round (= rollouts each peer trains on)")
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--eval-size", type=int, default=48)
    a = p.parse_args()
    start, load = time.perf_counter(), os.getloadavg()[0]
    results: dict[str, list[Outcome]] = {"sharing": [], "isolated": []}
    rows: list[list[object]] = []
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        for name, outcomes in results.items():
            o = play(a, seed, name == "sharing")
            outcomes.append(o)
            rows.append([name, seed, o.before.accuracy, o.after_accuracy, o.before.format, o.after_format, o.cumulative, f"{o.seconds:.0f}"])
        report(a, results, rows, start, load)  # after every seed: a run cut short still leaves its table


def report(a: argparse.Namespace, results: dict[str, list[Outcome]], rows: list[list[object]], start: float, load: float) -> None:
    print(f"\n{machine()} | load average {load:.1f} at start, {os.getloadavg()[0]:.1f} now (the machine is shared)")
    print(f"recipe {a.recipe}, model {a.model}, {a.peers} peers per arm, {a.rounds} rounds, {a.tasks} tasks x "
          f"{a.generations} generations x {a.max_new_tokens} tokens, lr {a.lr}, held-out {a.eval_size} problems "
          f"(greedy), {len(results['isolated'])} seed(s), {time.perf_counter() - start:.0f} s")  # fmt: skip
    print(table(["arm", "seed", "acc before", "acc after", "format before", "format after", "cumulative reward", "s"], rows))
    summary = [[name, mean_sd([o.before.accuracy for o in v]), mean_sd([o.after_accuracy for o in v]),
                mean_sd([o.after_accuracy - o.before.accuracy for o in v]), mean_sd([o.after_format for o in v]),
                mean_sd([o.cumulative for o in v])] for name, v in results.items()]  # fmt: skip
    print(table(["arm", "acc before", "acc after", "gain", "format after", "cumulative reward"], summary))
    iso, shared = (statistics.mean(o.cumulative for o in results[k]) for k in ("isolated", "sharing"))
    print(f"sharing / isolated cumulative reward: {shared / iso:.2f}x" if iso > 0 else "isolated reward is 0: no ratio", flush=True)

if __name__ == "__main__":
    main()
