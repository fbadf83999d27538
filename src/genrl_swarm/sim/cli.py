"""``genrl-swarm simulate``: one simulated swarm, printed as a table row (and JSON on request)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from genrl_swarm.sim.engine import simulate
from genrl_swarm.sim.model import MIXES, ChurnModel, NetModel, SimConfig
from genrl_swarm.sim.summary import table


def _param(text: str) -> tuple[str, int]:
    name, _, value = text.partition("=")
    try:
        return name, int(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"a strategy parameter is name=integer (k=8), not {text!r}") from e


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--peers", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--strategy", default="pull_spare", help="all | pull_k | pull_spare | gossip")
    p.add_argument(
        "--param", type=_param, action="append", default=[], metavar="NAME=INT", help="a strategy parameter (k=8, spares=4, extra=2, fanout=3, ttl=3)"
    )
    p.add_argument("--payload-kb", type=float, default=256)
    p.add_argument("--hostile", type=float, default=0.0, help="fraction of hostile peers (flood, forge, copy, far-future)")
    p.add_argument("--churn", type=float, default=0.1, help="fraction of the peers leaving per hour")
    p.add_argument("--nat", type=float, default=0.3, help="fraction of peers nobody can dial")
    p.add_argument("--loss", type=float, default=0.01, help="fraction of pulls that fail once")
    p.add_argument("--rtt-ms", type=float, default=70.0, help="median RTT (log-normal)")
    p.add_argument("--rtt-sigma", type=float, default=0.6)
    p.add_argument("--mix", choices=sorted(MIXES), default="home", help="access links: home, or mixed with datacenters")
    p.add_argument("--compute-s", type=float, default=10.0, help="median compute time per round (log-normal, sigma 0.3)")
    p.add_argument("--timeout", type=float, default=30.0, help="exchange deadline (game.exchange_timeout)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    try:
        cfg = SimConfig(
            peers=args.peers,
            rounds=args.rounds,
            payload_bytes=int(args.payload_kb * 1024),
            strategy=args.strategy,
            strategy_params=dict(args.param),
            hostile_fraction=args.hostile,
            timeout_s=args.timeout,
            compute_median_s=args.compute_s,
            seed=args.seed,
            net=NetModel(rtt_median_ms=args.rtt_ms, rtt_sigma=args.rtt_sigma, loss=args.loss, nat_fraction=args.nat, mix=args.mix),
            churn=ChurnModel(per_hour=args.churn),
        )
        summary = simulate(cfg)
    except ValueError as e:
        print(f"genrl-swarm: simulate: {e}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(summary)) if args.json else table([summary]))
    return 0
