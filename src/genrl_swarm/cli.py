"""The ``genrl-swarm`` command: run, join a swarm, check or list recipes, export a peer, deploy the contract.

Every error an operator can act on prints as one line with a documented exit status
(``genrl-swarm: recipe error: ...``, exit 2; the list: ``run/failures.py``), recipe errors before
any work starts. Heavy imports (torch, the launcher) happen only once a run really starts.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import logging
import os
import re
import shlex
import signal
import sys
from collections.abc import Sequence

from genrl_swarm import __version__
from genrl_swarm.config import check_components, load_recipe, packaged_recipes, resolve, validate
from genrl_swarm.coord import keys
from genrl_swarm.run.failures import Status, command
from genrl_swarm.run.quiet import quiet_third_party
from genrl_swarm.run.stopping import exit_status


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="genrl-swarm",
        description="Multi-agent, multi-stage RL across a swarm of peers.",
        epilog="Overrides use Hydra's grammar: key=value, +key=value (add), ~key (delete), group=option "
        "(communication=memory|none|torch|hivemind, coordinator=local|evm). "
        "Example: genrl-swarm run --recipe bandit game.max_rounds=20 learner.lr=0.3",
    )
    p.add_argument("--version", action="version", version=f"genrl-swarm {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    recipe_help = "a recipe YAML file, a packaged game (bandit) or a game's recipe (multistage_math/msm_dapodata_grpo.yaml)"
    run = sub.add_parser("run", help="play a recipe's game")
    run.add_argument("--recipe", required=True, help=recipe_help)
    _add_existing(run)
    run.add_argument("overrides", nargs="*", help="Hydra overrides")
    swarm = sub.add_parser("swarm", help="join (or start) a decentralized swarm: communication=hivemind, one peer")
    swarm.add_argument("--recipe", required=True, help=recipe_help)
    swarm.add_argument(
        "--initial-peers",
        action="append",
        default=[],
        metavar="MADDR",
        help="a running peer's multiaddr (repeat for several, or $GENRL_SWARM_INITIAL_PEERS); none: start a new swarm",
    )
    swarm.add_argument("--identity", default=None, help="identity file: this peer keeps its peer id across restarts")
    _add_existing(swarm)
    swarm.add_argument("overrides", nargs="*")
    check = sub.add_parser("validate", help="check a recipe without running it (builds peer 0's components)")
    check.add_argument("--recipe", required=True, help=recipe_help)
    check.add_argument("--no-build", action="store_true", help="check types and targets only; build nothing (fast)")
    check.add_argument("overrides", nargs="*")
    sub.add_parser("games", help="list the packaged games and their recipes")
    chain = sub.add_parser("chain", help="on-chain coordination").add_subparsers(dest="chain_command", required=True)
    deploy = chain.add_parser("deploy", help="deploy a SwarmCoordinator contract; prints its address")
    deploy.add_argument("--rpc-url", default=None, help="JSON-RPC URL (default: $GENRL_SWARM_RPC_URL or http://127.0.0.1:8545)")
    deploy.add_argument("--key-file", default=None, help="file holding the deployer's private key (default: $GENRL_SWARM_PRIVATE_KEY)")
    deploy.add_argument("--num-stages", type=int, default=1)
    _add_dashboard(sub)
    _add_envd(sub)
    _add_export(sub)
    _add_simulate(sub)
    return p


def _add_existing(command: argparse.ArgumentParser) -> None:
    """What to do with a peer directory that already holds a run (without either: refuse)."""
    group = command.add_mutually_exclusive_group()
    group.add_argument("--resume", action="store_true", help="continue from each peer's latest checkpoint")
    group.add_argument("--overwrite", action="store_true", help="delete the run already in the run directory and start over")


def _add_simulate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from genrl_swarm.sim.cli import add_arguments  # numpy only; the simulator loads on use

    add_arguments(sub.add_parser("simulate", help="simulate a swarm of up to 10,000 peers over a model of the internet"))


def _add_envd(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from genrl_swarm.envd.cli import add_arguments  # no grpc until the service runs

    add_arguments(sub.add_parser("envd", help="serve agentic environments (tool-calling sessions) over gRPC"))


def _add_export(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from genrl_swarm.run.export import add_arguments  # no torch: files and the recipe only

    add_arguments(sub.add_parser("export", help="a peer's checkpoint as a model folder transformers loads, with a Hub model card"))


def _add_dashboard(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from genrl_swarm.dashboard.serve import add_arguments  # standard library only; the server loads on use

    add_arguments(sub.add_parser("dashboard", help="a live page of one or more runs: peers, rewards, leaderboard, faults"))


def _chain(args: argparse.Namespace) -> int:
    from genrl_swarm.coord.evm import RPC_ENV, ChainClient, CoordinatorError, connect, load_private_key

    try:
        url = args.rpc_url or os.environ.get(RPC_ENV, "http://127.0.0.1:8545")
        client = ChainClient(connect(url), load_private_key(args.key_file))
        address = client.deploy(args.num_stages)
    except CoordinatorError as e:
        print(f"genrl-swarm: chain error: {e}", file=sys.stderr)
        return Status.CHAIN
    print(address)
    print(f"deployed SwarmCoordinator at {address} (owner and stage manager: {client.address})", file=sys.stderr)
    return 0


def _games() -> int:
    """Each packaged game with its recipes and their one-line descriptions."""
    for game, recipes in packaged_recipes().items():
        print(game)
        for name, description in recipes.items():
            print(f"  {name:<24} {description}")
    print("\nrun one: genrl-swarm run --recipe <game>[/<recipe>.yaml] [overrides]")
    return 0


def _quoted(text: str) -> str:
    """A Hydra override value that stays one string whatever it holds (a multiaddr, a path)."""
    # Hydra: backslashes are literal except a run right before a quote, which is doubled.
    return "'" + re.sub(r"(\\*)('|$)", lambda m: m[1] * 2 + ("\\'" if m[2] else ""), text) + "'"


def swarm_overrides(initial_peers: Sequence[str], identity: str | None) -> list[str]:
    """``genrl-swarm swarm``: the hivemind backend, one peer in this process, and its flags."""
    out = ["communication=hivemind", "swarm.num_peers=1"]
    if initial_peers:
        out.append(f"communication.initial_peers=[{','.join(_quoted(p) for p in initial_peers)}]")
    if identity:
        out.append(f"communication.identity_path={_quoted(identity)}")
    return out


def resume_command(argv: Sequence[str]) -> str:
    """The command line that continues a stopped run: the same one, with --resume."""
    kept = [a for a in argv if a not in ("--resume", "--overwrite")]
    return shlex.join(["genrl-swarm", *kept[:1], "--resume", *kept[1:]])


def _report_native_crashes() -> None:
    """A crash below Python (a C extension's segfault, an abort) prints every thread's stack
    instead of leaving an operator with a bare exit status -11. Left as it is where it is on
    already (pytest, ``python -X faulthandler``) or where stderr is no file (captured)."""
    if faulthandler.is_enabled():
        return
    with contextlib.suppress(OSError, ValueError):  # io.UnsupportedOperation (no fileno) is both
        faulthandler.enable(all_threads=True)


def main(argv: Sequence[str] | None = None) -> int:
    keys.take()  # the chain key out of the environment before any child process can inherit it
    args = _parser().parse_args(argv)
    _report_native_crashes()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_third_party()  # INFO is for our notes: JAX's and HTTP clients' internals stay off the console
    if args.command == "games":
        return _games()
    if args.command == "chain":
        return _chain(args)
    if args.command == "envd":
        from genrl_swarm.envd.cli import run as envd

        return command(lambda: envd(args))
    if args.command == "export":
        from genrl_swarm.run.export import run as export

        return command(lambda: export(args))
    if args.command == "simulate":
        from genrl_swarm.sim.cli import run as simulate

        return simulate(args)
    if args.command == "dashboard":
        from genrl_swarm.dashboard.serve import run as dashboard  # starlette and uvicorn load only here

        return dashboard(args)
    continued = resume_command(sys.argv[1:] if argv is None else argv)
    return command(lambda: _run(args, continued), after_storage=f"what was saved is intact: after the fix, continue with: {continued}")


def _run(args: argparse.Namespace, continued: str) -> int:
    """``run``, ``swarm`` and ``validate``: the recipe checked, then (not for validate) the peers
    run; ``command`` turns what goes wrong into its one line."""
    first = swarm_overrides(args.initial_peers, args.identity) if args.command == "swarm" else []
    cfg = load_recipe(args.recipe, [*first, *args.overrides])
    spec = resolve(cfg)
    if args.command == "validate":
        if args.no_build:
            validate(spec)
        else:
            check_components(spec)
        print(f"{args.recipe}: ok")
        return 0
    validate(spec)  # before the launcher's heavy imports: a typo costs no wait
    from genrl_swarm.run.launcher import run_recipe  # heavy imports only when running

    summary = run_recipe(cfg, resume=args.resume, stream=None, overwrite=args.overwrite, keep_results=False)
    standings = ", ".join(f"{p}={v:.2f}" for p, v in sorted(summary.standings.items()))
    print(f"cumulative reward: {standings or '-'}")
    print(f"logs: {summary.run_dir}/<peer>/metrics.jsonl, TensorBoard: tensorboard --logdir {summary.run_dir}")
    if summary.plot is not None:
        print(f"reward curve: {summary.plot}")
    if summary.interrupted:
        print(f"stopped: every peer saved its last finished round; continue with: {continued}", file=sys.stderr)
        return exit_status(summary.stopped_by or signal.SIGINT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
