"""The ``genrl-swarm`` command."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from genrl_swarm import __version__
from genrl_swarm.comm.errors import SwarmFailure
from genrl_swarm.config import RecipeError, apply_override, load_recipe, packaged_games, resolve, validate


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="genrl-swarm",
        description="Multi-agent, multi-stage RL across a swarm of peers.",
        epilog="Overrides are Hydra-style: key=value changes a field, +key=value adds one. "
        "Example: genrl-swarm run --recipe bandit game.max_rounds=20 trainer.lr=0.3",
    )
    p.add_argument("--version", action="version", version=f"genrl-swarm {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="play a recipe's game")
    run.add_argument("--recipe", required=True, help="a recipe YAML file, or a packaged game's name")
    run.add_argument("--resume", action="store_true", help="continue from each peer's latest checkpoint")
    run.add_argument("overrides", nargs="*", help="key=value recipe overrides")
    swarm = sub.add_parser("swarm", help="join (or start) a decentralized swarm over a HiveMind DHT")
    swarm.add_argument("--recipe", required=True)
    swarm.add_argument("--initial-peers", action="append", default=[], metavar="MADDR", help="a running peer's multiaddr (repeat for several, or $GENRL_SWARM_INITIAL_PEERS); none: start a new swarm")
    swarm.add_argument("--identity", default=None, help="identity file: this peer keeps its peer id across restarts")
    swarm.add_argument("--resume", action="store_true")
    swarm.add_argument("overrides", nargs="*")
    check = sub.add_parser("validate", help="check a recipe without running it")
    check.add_argument("--recipe", required=True)
    check.add_argument("overrides", nargs="*")
    sub.add_parser("games", help="list the packaged games")
    chain = sub.add_parser("chain", help="on-chain coordination").add_subparsers(dest="chain_command", required=True)
    deploy = chain.add_parser("deploy", help="deploy a SwarmCoordinator contract; prints its address")
    deploy.add_argument("--rpc-url", default=None, help="JSON-RPC URL (default: $GENRL_SWARM_RPC_URL or http://127.0.0.1:8545)")
    deploy.add_argument("--key-file", default=None, help="file holding the deployer's private key (default: $GENRL_SWARM_PRIVATE_KEY)")
    deploy.add_argument("--num-stages", type=int, default=1)
    return p


def _chain(args: argparse.Namespace) -> int:
    from genrl_swarm.coord.evm import RPC_ENV, ChainClient, CoordinatorError, connect, load_private_key

    try:
        url = args.rpc_url or os.environ.get(RPC_ENV, "http://127.0.0.1:8545")
        client = ChainClient(connect(url), load_private_key(args.key_file))
        address = client.deploy(args.num_stages)
    except CoordinatorError as e:
        print(f"genrl-swarm: chain error: {e}", file=sys.stderr)
        return 4
    print(address)
    print(f"deployed SwarmCoordinator at {address} (owner and stage manager: {client.address})", file=sys.stderr)
    return 0


def _to_dht(cfg: Any, initial_peers: list[str], identity: str | None) -> None:
    """Point a recipe at the HiveMind backend, one peer per process."""
    target = "genrl_swarm.comm.hivemind_dht.HivemindBackend"
    if cfg.communication.get("_target_") != target:
        cfg.communication = {"_target_": target}
    if initial_peers:
        cfg.communication.initial_peers = initial_peers
    if identity:
        cfg.communication.identity_path = identity
    cfg.swarm.num_peers = 1


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "games":
        print("\n".join(packaged_games()))
        return 0
    if args.command == "chain":
        return _chain(args)
    try:
        cfg = load_recipe(args.recipe)
        if args.command == "swarm":
            _to_dht(cfg, args.initial_peers, args.identity)  # before the overrides, which may refine it
        for item in args.overrides:
            apply_override(cfg, item)
        if args.command == "validate":
            validate(resolve(cfg))
            print(f"{args.recipe}: ok")
            return 0
        from genrl_swarm.run.launcher import run_recipe  # heavy imports only when running

        summary = run_recipe(cfg, resume=args.resume)
    except RecipeError as e:
        print(f"genrl-swarm: recipe error: {e}", file=sys.stderr)
        return 2
    except SwarmFailure as e:
        print(f"genrl-swarm: swarm failure: {e}", file=sys.stderr)
        # A process group with a hung peer blocks interpreter shutdown (its destructor waits on
        # the peer), so leave at once: metrics and checkpoints are already closed and on disk.
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(3)
    standings = ", ".join(f"{p}={v:.2f}" for p, v in sorted(summary.standings.items()))
    print(f"cumulative reward: {standings or '-'}")
    print(f"logs: {summary.run_dir}/<peer>/metrics.jsonl, TensorBoard: tensorboard --logdir {summary.run_dir}")
    if summary.plot is not None:
        print(f"reward curve: {summary.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
