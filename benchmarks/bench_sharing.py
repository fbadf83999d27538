"""Does the swarm make learning better? Sharing vs isolated peers on a task where it can.

SAPO's channel is solved rollouts of questions and skills a peer did not see itself. The design
gives that channel a chance on a CPU: one-digit arithmetic where each peer is a specialist
(peer i trains only on operation i: +, -, x), each peer gets its own questions every round
(per-peer questions), and the held-out set covers all three operations. An isolated specialist
never trains on the other two operations; a sharing one trains on the informative groups the
others solved (filter-first SAPO draw, senders taking turns).

Equal compute: in both arms each peer generates ``tasks x generations`` completions per round and
trains on at most ``tasks`` groups (isolated: all its own; sharing: half own, half the swarm's).
Per arm and seed: greedy held-out accuracy before, during (the curve) and after training, per
operation and overall (mean over peers). Mean ± sd over seeds, and the per-seed difference.

Arms (``--arms``): ``isolated``; ``sharing`` (the learner as it is: a swarm token weighs min(1, n *
the receiver's own probability of it), ``lm/grpo_loss.py``); ``sharing-equal-weight`` (every swarm
token weighing 1, the rule before that bound: does the bound cost sharing its gain?).

    python benchmarks/bench_sharing.py --model tiny-random --rounds 2 --seeds 1 --eval-size 9   # smoke
    python benchmarks/bench_sharing.py                                                          # SmolLM2, 3 seeds
    python benchmarks/bench_sharing.py --arms sharing sharing-equal-weight isolated             # the bound's cost
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass

from common import machine, mean_sd, table

from genrl_swarm.config import load_recipe
from genrl_swarm.data.digits import OPS
from genrl_swarm.games.reasoning_gym.heldout import HeldOutEval, evaluate
from genrl_swarm.run.launcher import Checkpointer, build_managers, run_managers


@dataclass(frozen=True)
class Outcome:
    before: dict[str, float]  # op -> accuracy (peer 0: every peer starts from the same weights)
    after: dict[str, float]  # op -> accuracy, mean over peers
    curve: list[tuple[int, float]]  # (rounds trained, overall accuracy, mean over peers)
    seconds: float


def by_op(managers: list, tasks: list) -> dict[str, float]:
    """Greedy held-out accuracy per operation and overall, mean over ``managers``' policies."""
    out: dict[str, float] = {}
    for op in (*OPS, "all"):
        subset = [t for t in tasks if op == "all" or t.prompt.split()[3] == op]
        out[op] = statistics.mean(evaluate(m.policy, subset).accuracy for m in managers)
    return out


ARMS = ("sharing", "isolated", "sharing-equal-weight")
#: ``--adapters``: LoRA r 8 on every projection, the peers on one shared base (``make demo``'s
#: adapter arm, benchmarks/bench_demo_adapters.py; pass its rate too: ``--lr 3e-4``).
ADAPTERS = ("+policy.lora.r=8", "+policy.lora.alpha=16", "+policy.lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]")


def play(a: argparse.Namespace, seed: int, arm: str) -> Outcome:
    shared = arm != "isolated"
    half = a.tasks // 2
    local, external = (half, a.tasks - half) if shared else (a.tasks, 0)
    specialties = [f"+data.peer_ops.peer-{i}=['{op}']" for i, op in enumerate(OPS)]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        cfg = load_recipe("reasoning_gym/digits", [
            f"seed={seed}", f"swarm.num_peers={len(OPS)}", f"game.max_rounds={a.rounds}", "game.mode=train",
            f"run.dir={out}", "run.console=false", "run.tensorboard=false", "run.plot=false", "run.checkpoint_every=0",
            f"data.tasks_per_round={a.tasks}", f"data.eval_size={a.eval_size}", "data.questions=per_peer",
            *specialties,
            f"policy.model={a.model}", f"policy.sampling.max_new_tokens={a.max_new_tokens}",
            f"policy.sampling.num_generations={a.generations}", f"learner.grpo.learning_rate={a.lr}",
            f"learner.grpo.num_local={local}", f"learner.grpo.num_external={external}",
            f"++learner.grpo.swarm_weight_bound={arm != 'sharing-equal-weight'}", *(ADAPTERS if a.adapters else ()),
        ])  # fmt: skip
        managers, _ = build_managers(cfg)
        held_out = managers[0].data.eval_tasks()
        before = by_op(managers[:1], held_out)
        curve = HeldOutEval(every=a.every, max_rounds=a.rounds)
        for m in managers:  # no checkpoints of a throwaway run
            m.hooks.after_round = [h for h in m.hooks.after_round if not isinstance(h, Checkpointer)] + [curve]
            m.hooks.after_game = []
        run_managers(managers)
        after = by_op(managers, held_out)
    points = [(0, before["all"]), *((r, acc) for r, acc, _ in curve.table())]
    return Outcome(before, after, points, time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--every", type=int, default=4, help="held-out curve every this many rounds")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--tasks", type=int, default=4, help="questions per peer and round (= groups each peer trains on)")
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--eval-size", type=int, default=48)
    p.add_argument("--arms", nargs="+", choices=ARMS, default=["sharing", "isolated"])
    p.add_argument("--adapters", action="store_true", help="adapter peers on one shared base (pass --lr 3e-4 with it)")
    a = p.parse_args()
    start, load = time.perf_counter(), os.getloadavg()[0]
    results: dict[str, list[Outcome]] = {name: [] for name in a.arms}
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        for name, outcomes in results.items():  # every arm per seed, side by side in time
            outcomes.append(play(a, seed, name))
        report(a, results, start, load)  # after every seed: a run cut short still leaves its table


def report(a: argparse.Namespace, results: dict[str, list[Outcome]], start: float, load: float) -> None:
    print(f"\n{machine()} | load average {load:.1f} at start, {os.getloadavg()[0]:.1f} now")
    print(f"digits, model {a.model}, {len(OPS)} specialist peers (peer i trains on {', '.join(OPS)}[i]), per-peer questions, "
          f"{a.rounds} rounds, {a.tasks} questions x {a.generations} generations x {a.max_new_tokens} tokens per peer-round, "
          f"lr {a.lr}, held-out {a.eval_size} problems over all operations (greedy), {len(next(iter(results.values())))} seed(s), "
          f"{time.perf_counter() - start:.0f} s, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")  # fmt: skip
    cols = [*OPS, "all"]
    rows = [[name, "before", *(mean_sd([o.before[c] for o in v]) for c in cols)] for name, v in results.items()]
    rows += [[name, "after", *(mean_sd([o.after[c] for o in v]) for c in cols)] for name, v in results.items()]
    print(table(["arm", "when", *(f"acc {c}" for c in cols)], rows))
    for name, other in [(x, y) for i, x in enumerate(results) for y in list(results)[i + 1 :]]:
        diffs = [s.after["all"] - i.after["all"] for s, i in zip(results[name], results[other])]
        print(f"{name} - {other}, overall held-out accuracy after training, per seed: {', '.join(f'{d:+.3f}' for d in diffs)}"
              f" (mean {mean_sd(diffs) if len(diffs) > 1 else f'{diffs[0]:+.3f}'})")  # fmt: skip
    for name, v in results.items():
        rounds = [r for r, _ in v[0].curve]
        print(f"curve {name}: " + ", ".join(f"{r}: {mean_sd([dict(o.curve)[r] for o in v])}" for r in rounds), flush=True)


if __name__ == "__main__":
    main()
