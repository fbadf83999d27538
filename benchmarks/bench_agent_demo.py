"""Held-out success of an agent model before and after training (issue 31: does demo-agent learn?).

Plays one greedy episode per held-out task with ``AgentPolicy`` and reports, per task kind, the
number of episodes, the success rate (the environment's reward) and the fraction of episodes
with a parsable call of the task's tool. Held-out seeds come from ``games.agent.heldout``: a
stream of their own, disjoint from the seeds (and, for calculator levels, the questions) of the
run's first ``--train-rounds`` training rounds with the same data settings.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_agent_demo.py --model HuggingFaceTB/SmolLM2-135M-Instruct
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_agent_demo.py --model runs/demo-agent/peer-0  # its latest checkpoint

``--model`` is a hub id, a model directory, a checkpoint (``.../checkpoints/round_N``) or a peer's
run directory (its latest checkpoint).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, table  # noqa: E402

from genrl_swarm.games.agent.warmup import DEMO_PREFILL  # noqa: E402


def model_dir(name: str) -> str:
    """A loadable model for ``name``: a peer run directory or checkpoint resolves to its model."""
    path = Path(name)
    if (path / "checkpoints").is_dir():
        path = path / "checkpoints"
    if (path / "latest").is_file():
        path = path / (path / "latest").read_text().strip()
    if (path / "policy" / "model").is_dir():
        return str(path / "policy" / "model")
    return name


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--tasks", nargs="+", default=["calculator-1"])
    p.add_argument("--n", type=int, default=32, help="held-out episodes per task kind")
    p.add_argument("--prefill", default=json.dumps(DEMO_PREFILL), help="JSON list, one scaffold per model turn ('[]': none)")
    p.add_argument("--max-turns", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=768)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=42, help="the run's data seed (its training seeds are excluded)")
    p.add_argument("--train-rounds", type=int, default=100, help="training rounds whose seeds are excluded")
    p.add_argument("--tasks-per-round", type=int, default=2)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--sample", action="store_true", help="sample at temperature 1 instead of greedy")
    p.add_argument("--show", type=int, default=0, help="print the model turns of the first SHOW episodes")
    p.add_argument("--json", type=Path, help="also write the result here")
    args = p.parse_args(argv)

    from genrl_swarm.games.agent.game import AgentData
    from genrl_swarm.games.agent.heldout import evaluate, heldout_tasks
    from genrl_swarm.paradigms.agents.policy import AgentPolicy

    prefill = json.loads(args.prefill)
    data = AgentData(args.tasks, args.tasks_per_round, args.group_size, args.max_turns, args.max_tokens, 0, args.seed, prefill)
    tasks = heldout_tasks(data, args.n, args.train_rounds)
    start = time.perf_counter()
    policy = AgentPolicy(model_dir(args.model), sampling={"max_new_tokens": args.max_new_tokens, "temperature": 1.0}, seed=0)
    loaded = time.perf_counter()
    replies: list[list[str]] = []
    scores = evaluate(policy, tasks, greedy=not args.sample, replies=replies)
    wall = time.perf_counter() - loaded
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
    print(machine(), f"| OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')} | load {' '.join(load)}")
    print(f"model {model_dir(args.model)} | {'sampled' if args.sample else 'greedy'} | prefill {prefill} | max_turns {args.max_turns}")
    rows = [[s.kind, s.n, f"{s.success:.3f}", f"{s.call:.3f}", f"{s.answer:.3f}", f"{s.turns:.2f}"] for s in scores]
    print(table(["task", "N", "success", "parsable call", "answer", "turns"], rows))
    for task, turns in list(zip(tasks, replies))[: args.show]:
        print(f"--- {task.metadata['task']} #{task.metadata['seed']}: {turns!r}")
    print(f"load {loaded - start:.1f}s, episodes {wall:.1f}s")
    if args.json:
        out = {"model": model_dir(args.model), "greedy": not args.sample, "wall_s": wall, "load": load}
        out["scores"] = [s.__dict__ for s in scores]
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
