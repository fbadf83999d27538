"""A MARL run's results: a table of evaluation return against environment steps per peer, and
``return_curve.png`` (evaluation and training return against environment steps); with
``--marl-eval FILE``, the run's evaluations as one marl-eval file to put beside Mava's.

    python -m genrl_swarm.paradigms.marl.report runs/demo-marl
    python -m genrl_swarm.paradigms.marl.report runs/demo-marl --marl-eval mava_json/swarm.json --algorithm swarm_ff_ippo
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from genrl_swarm.paradigms.marl.logs import episode_returns
from genrl_swarm.run.metrics import read_metrics
from genrl_swarm.run.plot import pyplot, save_figure


@dataclass(frozen=True)
class Curve:
    """One peer's evaluations: environment steps, mean and std of the evaluation return."""

    label: str
    steps: list[int]
    mean: list[float]
    std: list[float]


def eval_curves(run_dir: Path) -> list[Curve]:
    """Every marl-eval JSON file of a run (one per peer), as curves."""
    curves = []
    for path in sorted((run_dir / "marl_eval").glob("*.json")):
        for _env, tasks in json.loads(path.read_text()).items():
            for _task, systems in tasks.items():
                for system, seeds in systems.items():
                    for seed, run in seeds.items():
                        rows = [run[k] for k in sorted((k for k in run if k.startswith("step_")), key=lambda k: int(k[5:]))]
                        returns = [episode_returns(r) for r in rows]
                        curves.append(Curve(f"{system} {seed}", [r["step_count"] for r in rows],
                                            [float(np.mean(x)) for x in returns], [float(np.std(x)) for x in returns]))  # fmt: skip
    return curves


def for_marl_eval(run_dir: Path, algorithm: str | None = None) -> dict[str, Any]:
    """The run's marl-eval files as one document, each peer a run ``seed_0`` .. ``seed_{n-1}``
    (in seed order), under ``algorithm`` (default: as written, ``ff_ippo``/``ff_mappo``).

    marl-eval's ``create_matrices_for_rliable`` takes the run names of the first algorithm and
    reads the same names in every other one: Mava's runs are ``seed_0`` .. ``seed_9``, ours are
    named by the peer's seed (``seed_42000``), so they are renumbered here. Name the algorithm
    apart (``swarm_ff_ippo``) to compare with Mava's own ``ff_ippo`` runs rather than pool them."""
    merged: dict[str, Any] = {}
    for path in sorted((run_dir / "marl_eval").glob("*.json")):
        for env, tasks in json.loads(path.read_text()).items():
            for task, systems in tasks.items():
                for system, seeds in systems.items():
                    runs = merged.setdefault(env, {}).setdefault(task, {}).setdefault(algorithm or system, {})
                    for seed in sorted(seeds, key=lambda s: int(s.rpartition("_")[2]) if s.rpartition("_")[2].isdigit() else 0):
                        runs[f"seed_{len(runs)}"] = seeds[seed]
    return merged


def training_curves(run_dir: Path) -> Iterator[tuple[str, list[float], list[float]]]:
    """(peer, environment steps, return of its own rollout) from each peer's metrics.jsonl."""
    for path in sorted(run_dir.glob("*/metrics.jsonl")):
        rows = [r for r in read_metrics(path) if "train/env_steps" in r]
        yield path.parent.name, [r["train/env_steps"] for r in rows], [r["reward/peer/" + r["peer"]] for r in rows if "reward/peer/" + r["peer"] in r]


def table(curves: list[Curve]) -> str:
    lines = [f"{'env steps':>10}  " + "  ".join(f"{c.label:>18}" for c in curves)]
    for i, step in enumerate(curves[0].steps if curves else []):
        cells = [f"{c.mean[i]:>10.3f} ± {c.std[i]:5.3f}" if i < len(c.mean) else " " * 18 for c in curves]
        lines.append(f"{step:>10}  " + "  ".join(cells))
    return "\n".join(lines)


def plot(run_dir: Path, curves: list[Curve]) -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for c in curves:
        mean, std = np.array(c.mean), np.array(c.std)
        line = ax.plot(c.steps, mean, "-o", label=f"eval {c.label}")[0]
        ax.fill_between(c.steps, mean - std, mean + std, color=line.get_color(), alpha=0.15)
    for peer, steps, returns in training_curves(run_dir):
        if len(steps) == len(returns):
            ax.plot(steps, returns, alpha=0.4, label=f"training rollouts {peer}")
    return save_figure(fig, ax, run_dir / "return_curve.png", xlabel="environment steps (per peer)", ylabel="team return", title=run_dir.name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--marl-eval", type=Path, metavar="FILE", help="also write the run's evaluations as one marl-eval file")
    parser.add_argument("--algorithm", help="the algorithm name in that file (default: ff_ippo/ff_mappo, as written)")
    args = parser.parse_args(argv)
    curves = eval_curves(args.run_dir)
    if not curves:
        raise SystemExit(f"no marl-eval JSON under {args.run_dir / 'marl_eval'}: was it a marl run with learner.log_dir set?")
    print(table(curves))
    out = plot(args.run_dir, curves)
    if out is not None:
        print(f"return curve: {out}")
    if args.marl_eval is not None:
        args.marl_eval.parent.mkdir(parents=True, exist_ok=True)
        args.marl_eval.write_text(json.dumps(for_marl_eval(args.run_dir, args.algorithm), indent=1))
        print(f"marl-eval file: {args.marl_eval}")


if __name__ == "__main__":
    main()
