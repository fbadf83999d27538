"""Synchronous GRPO loop vs the asynchronous Ray pipeline, same model, data, reward and budget.

    .venv/bin/python benchmarks/bench_async.py                       # tiny model, max_staleness 0, 1, 2
    .venv/bin/python benchmarks/bench_async.py --model smollm2 --updates 6 --max-new-tokens 32 --workers 1 --worker-cpus 1

The budget is ``--updates`` learner batches on both sides (a batch whose groups carry no signal
counts too), on the same task rounds in the same order; the pipeline's warm-up generations are
finished and discarded before its clock starts (``settle``), so neither side starts ahead.
Reports the completions the learner trained on per second (after start-up, which is reported
apart; workers also generate a few draws that were dropped as stale or still sat in the buffer
at the end: the "generated" column), reward per generated completion and against wall clock,
the learner's idle time and the staleness the learner trained at. The sync
loop alternates generate -> score -> train in one process with all threads; the pipeline runs a
learner actor (1 CPU) and rollout workers (the rest) that overlap. Completion lengths vary (the
tiny model stops after a prompt-dependent number of tokens, max_new_tokens caps it), so the
longest completion of a batch decides how long a synchronous generation takes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from typing import Any

from common import machine, table

from genrl_swarm.core import GameState, RewardManager, Rollout, RoundRewards, ScoredRollout, StageInput, Task

#: The first timed round of both sides (the sync loop's warm-up is the round before).
SYNC_ROUND = 1_000_000


class Digits(RewardManager):
    """Digits per completion (a reward the tiny model's samples differ on, so every group trains)."""

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        return [min(1.0, sum(c.isdigit() for c in text) / 8) for text in rollout.texts]


def make_data(tasks: int) -> Any:
    from genrl_swarm.data.reasoning_gym import ReasoningGymData

    return ReasoningGymData(
        ["basic_arithmetic"], tasks_per_round=tasks, seed=1, dataset_config={"basic_arithmetic": {"max_terms": 3, "max_digits": 2}}
    )


def run_sync(a: argparse.Namespace, policy_kwargs: dict[str, Any], grpo: dict[str, Any], threads: int) -> dict[str, Any]:
    import torch

    from genrl_swarm.paradigms.lm.learner import GRPOLearner
    from genrl_swarm.paradigms.lm.policy import LMPolicy

    torch.set_num_threads(threads)
    data, reward = make_data(a.batch_groups), Digits()
    policy = LMPolicy(**policy_kwargs, seed=a.seed)
    learner = GRPOLearner(policy, grpo, seed=a.seed)
    completions, rewards, gen_s, lengths, curve = 0, 0.0, 0.0, [], []
    start = time.perf_counter()
    for step in range(-1, a.updates):  # step -1: warm-up (first forward/backward, data), not timed, as in the pipeline
        if step == 0:
            completions, rewards, gen_s, lengths, curve, start = 0, 0.0, 0.0, [], [], time.perf_counter()
        t0 = time.perf_counter()
        tasks = data.round_tasks(SYNC_ROUND + step)
        inputs = [t.input(0) for t in tasks]
        bodies = policy.rollouts(inputs)
        gen_s += time.perf_counter() - t0
        scored = []
        for task, inp, body in zip(tasks, inputs, bodies):
            texts = policy.texts(body)
            r = reward.score(task, inp, Rollout("me", step, 0, body, texts))
            scored.append(ScoredRollout(Rollout("me", step, 0, body, texts), tuple(r)))
            completions, rewards = completions + len(r), rewards + sum(r)
            lengths += [len(s.completion_ids) for s in body.samples]
        learner.train(GameState(step, "me"), RoundRewards(step, tuple(scored)))
        policy.load_weights(learner.weights())
        curve.append((time.perf_counter() - start, rewards / completions))
    wall = time.perf_counter() - start
    return {"mode": f"sync {threads}t", "s": "-", "completions": completions, "generated": completions, "wall": wall, "idle": gen_s / wall, "stale_mean": 0.0,
            "stale_max": 0, "reward": rewards / completions, "dropped": 0, "startup": 0.0, "curve": curve, "lengths": lengths}  # fmt: skip


def run_async(a: argparse.Namespace, policy_kwargs: dict[str, Any], grpo: dict[str, Any], max_staleness: int) -> dict[str, Any]:
    import ray

    from genrl_swarm.paradigms.lm.async_grpo.config import PipelineConfig
    from genrl_swarm.paradigms.lm.async_grpo.pipeline import AsyncPipeline

    t0 = time.perf_counter()
    cfg = PipelineConfig(num_workers=a.workers, max_staleness=max_staleness, batch_groups=a.batch_groups,
                         worker_cpus=a.worker_cpus, learner_cpus=1.0, timeout=900.0)  # fmt: skip
    pipe = AsyncPipeline.start(cfg, policy_kwargs, grpo, make_data(a.batch_groups // a.split), Digits(), seed=a.seed)
    pipe.run(updates=1, seconds=900)  # warm-up update (first forward/backward in each process), not timed
    pipe.settle()  # start line: nothing generated during the warm-up is trained on in the timed window
    pipe.counters.draws = SYNC_ROUND - pipe.cfg.task_offset  # the timed draws are the sync loop's rounds, in order
    startup = time.perf_counter() - t0
    c0, r0, i0, u0 = pipe.counters.completions, pipe.counters.reward_sum, pipe.learner_times()[0], pipe.counters.updates
    start, v0 = time.perf_counter(), pipe.version
    curve: list[tuple[float, float]] = []
    done_batches = threading.Event()  # the budget is learner batches, as in the sync loop (a batch without signal
    # moves no version, so ``run(updates=...)``, which counts versions, would train on more batches than sync)

    def on_update(_: dict[str, float]) -> None:
        curve.append((time.perf_counter() - start, 0.0))
        if pipe.counters.updates - u0 >= a.updates:
            done_batches.set()

    pipe.run(seconds=1800, stop=done_batches, on_update=on_update)
    wall = time.perf_counter() - start
    idle, _ = pipe.learner_times()
    gens = [e for e in pipe.events if e.kind == "generate" and e.time >= start - pipe._clock]
    seen = lambda t: [e.mean_reward for e in gens if e.time <= t + (start - pipe._clock)]  # noqa: E731
    curve = [(t, statistics.mean(seen(t))) for t, _ in curve if seen(t)]  # an update may come before the first new generation
    stats = pipe.buffer.stats
    done = pipe.counters.completions - c0
    trained = (pipe.counters.updates - u0) * a.batch_groups * a.num_generations
    out = {"mode": f"ray {a.workers}w", "s": max_staleness, "completions": trained, "generated": done, "wall": wall, "idle": (idle - i0) / wall,
           "stale_mean": stats.metrics()["async/staleness_mean"], "stale_max": int(stats.metrics()["async/staleness_max"]),
           "reward": (pipe.counters.reward_sum - r0) / max(done, 1), "dropped": stats.dropped, "startup": startup, "curve": curve,
           "versions": pipe.version - v0}  # fmt: skip
    pipe.shutdown()
    if ray.is_initialized():
        ray.shutdown()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--updates", type=int, default=100)
    p.add_argument("--batch-groups", type=int, default=4)
    p.add_argument("--split", type=int, default=1, help="a worker draw holds batch_groups/split prompts")
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--worker-cpus", type=float, default=0.5)
    p.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--sync-threads", type=int, nargs="+", default=sorted({os.cpu_count() or 1, 1}, reverse=True))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--off-policy", default="", help="learner.grpo.off_policy for both sides (tis, decoupled, none); default: the learner's")
    a = p.parse_args()
    policy_kwargs = {"model": a.model, "sampling": {"num_generations": a.num_generations, "max_new_tokens": a.max_new_tokens}}
    grpo = {"learning_rate": 1e-4, "num_local": -1, "micro_batch_size": 8} | ({"off_policy": a.off_policy} if a.off_policy else {})
    load = os.getloadavg()
    print(
        f"# bench_async | {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} | {machine()} | load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(f"# model {a.model} | {a.updates} updates x {a.batch_groups} prompts x {a.num_generations} completions | max_new_tokens {a.max_new_tokens}")
    rows = [run_sync(a, policy_kwargs, grpo, t) for t in a.sync_threads]
    lengths = rows[0]["lengths"]
    print(f"# completion length (sync run): mean {statistics.mean(lengths):.1f}, max {max(lengths)}, "
          f"share at max_new_tokens {sum(n == a.max_new_tokens for n in lengths) / len(lengths):.0%}", flush=True)  # fmt: skip
    for s in a.staleness:
        rows.append(run_async(a, policy_kwargs, grpo, s))
        print(f"# done: ray max_staleness={s} (start-up {rows[-1]['startup']:.1f}s)", flush=True)
    base = max(r["completions"] / r["wall"] for r in rows if r["mode"].startswith("sync"))  # the faster sync setting
    print(table(
        ["mode", "max_staleness", "trained", "generated", "wall s", "trained completions/s", "vs best sync", "learner idle", "staleness mean/max",
         "reward/completion", "stale dropped", "start-up s"],
        [[r["mode"], r["s"], r["completions"], r["generated"], r["wall"], r["completions"] / r["wall"], f"{r['completions'] / r['wall'] / base:.2f}x",
          f"{r['idle']:.0%}", f"{r['stale_mean']:.2f}/{r['stale_max']}", r["reward"], r["dropped"], r["startup"]] for r in rows],
    ))  # fmt: skip
    print("\nreward (mean over completions so far) against wall clock, at each update:")
    for r in rows:
        points = r["curve"][:: max(1, len(r["curve"]) // 6)]
        print(f"  {r['mode']:>8} s={r['s']}: " + "  ".join(f"{t:5.1f}s:{v:.3f}" for t, v in points))


if __name__ == "__main__":
    main()
