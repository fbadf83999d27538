"""The exchange strategies compared in the simulator, the issue's targets checked at 10,000
peers, and the simulator validated against the real HiveMind transport on loopback.

    python benchmarks/bench_sim.py                 # sweeps, plots (docs/sim_*.png), targets
    python benchmarks/bench_sim.py --quick         # the same at a tenth of the size
    python benchmarks/bench_sim.py --validate      # only: real loopback rounds at 4 and 8 peers vs the prediction

Every sweep varies one axis around the base case (256 KB payloads, home links, 10% churn per
hour, 30% unreachable, 1% loss, no hostile peers) and runs each strategy with k = 8.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "src"))

from genrl_swarm.sim import ChurnModel, SimConfig, Summary, simulate, table  # noqa: E402

STRATEGIES = {
    "all": {},
    "pull_k": {"k": 8},
    "gossip": {"k": 8, "fanout": 3, "ttl": 3},
    "pull_spare": {"k": 8, "spares": 4, "extra": 2},
}
AXES = {
    "peers": ("peers", [10, 100, 1000, 10000]),
    "payload": ("payload KB", [16, 256, 1024, 4096]),
    "churn": ("churn per hour", [0.0, 0.1, 1.0, 10.0]),
    "hostile": ("hostile fraction", [0.0, 0.1, 0.2, 0.3]),
}


def configure(base: SimConfig, axis: str, value: float) -> SimConfig:
    if axis == "peers":
        return replace(base, peers=int(value), observe=max(10, min(int(value), 50_000 // int(value))))
    if axis == "payload":  # trust.max_bytes raised with it: honest payloads are never over budget
        return replace(base, payload_bytes=int(value * 1024), max_bytes=max(base.max_bytes, int(value * 2048)))
    if axis == "churn":
        return replace(base, churn=ChurnModel(per_hour=value))
    return replace(base, hostile_fraction=value)


def sweep(base: SimConfig, axis: str, values: Sequence[float]) -> dict[str, list[Summary]]:
    out: dict[str, list[Summary]] = {}
    for name, params in STRATEGIES.items():
        for value in values:
            cfg = replace(configure(base, axis, value), strategy=name, strategy_params=params)
            out.setdefault(name, []).append(simulate(cfg))
            print(f"  {axis}={value} {name}: {out[name][-1].wall_s:.1f}s", file=sys.stderr, flush=True)
    return out


def plot(axis: str, label: str, values: Sequence[float], results: dict[str, list[Summary]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("received", "wanted payloads received by the deadline"),
        ("round_p95", "round time p95 (s)"),
        ("mb_in", "MB downloaded per peer per round"),
        ("mb_out_p95", "MB uploaded per round, p95 peer"),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(17, 3.8))
    for ax, (key, title) in zip(axes, panels):
        for name, rows in results.items():
            ax.plot(values, [getattr(r, key) for r in rows], marker="o", label=name)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(label)
        if axis in ("peers", "payload"):
            ax.set_xscale("log")
        if key.startswith("mb"):
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def targets(base: SimConfig, rounds: int, peers: int) -> list[Summary]:
    """The issue's target case, its 10-peer reference, and the same with 20% hostile peers."""
    spare = replace(base, strategy="pull_spare", strategy_params=STRATEGIES["pull_spare"], rounds=rounds)
    rows = [simulate(replace(spare, peers=10)), simulate(replace(spare, peers=peers)), simulate(replace(spare, peers=peers, hostile_fraction=0.2))]
    for row in rows:
        print(f"  target run N={row.peers} hostile={row.hostile:.0%}: {row.wall_s:.1f}s", file=sys.stderr, flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a tenth of the peers and rounds")
    p.add_argument("--rounds", type=int, default=20, help="rounds per sweep point")
    p.add_argument("--axes", nargs="*", default=list(AXES), choices=list(AXES))
    p.add_argument("--validate", action="store_true", help="only the loopback validation against real p2pd peers")
    p.add_argument("--no-targets", action="store_true")
    args = p.parse_args(argv)
    if args.validate:
        from bench_sim_validate import main as validate  # real p2pd peers: hivemind needed

        validate()
        return
    scale = 10 if args.quick else 1
    base = SimConfig(peers=1000 // scale, rounds=max(args.rounds // scale, 3), observe=50)  # all-to-all: 50 receivers in detail
    for axis in args.axes:
        label, values = AXES[axis]
        if axis == "peers":
            values = [v // scale for v in values if v // scale >= 2]
        print(f"## against {label} (N={base.peers} unless varied, {base.rounds} rounds)", flush=True)
        results = sweep(base, axis, values)
        print(table([r for rows in results.values() for r in rows]), flush=True)
        plot(axis, label, values, results, ROOT / "docs" / f"sim_{axis}.png")
    if not args.no_targets:
        print(f"## targets: pull_spare, 256 KB, home links, 10% churn/h, {100 // scale} rounds", flush=True)
        started = time.perf_counter()
        print(table(targets(base, 100 // scale, 10_000 // scale)), flush=True)
        print(f"(target runs took {time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
