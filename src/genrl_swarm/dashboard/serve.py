"""``genrl-swarm dashboard``: check the options, bind, print the link, serve until Ctrl-C or SIGTERM.

The socket is bound here, before uvicorn starts, so ``--port 0`` prints the port it got and a
port in use is one error line. Binding anywhere but the loopback needs ``--allow-remote`` and a
token (``--token``, ``$GENRL_SWARM_DASHBOARD_TOKEN``, or one generated and printed).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import secrets
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from genrl_swarm.dashboard.hub import Hub

TOKEN_ENV = "GENRL_SWARM_DASHBOARD_TOKEN"
TOKEN_PATTERN = re.compile(r"^[A-Za-z0-9_.~-]{16,256}$")  # safe in a URL and a cookie as is


class DashboardError(Exception):
    """A bad option: printed as one line, exit 2."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--run-dir", action="append", default=[], metavar="DIR", help="a run directory (runs/<game>, holding one folder per peer); repeat for several"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; anything else needs --allow-remote)")
    p.add_argument("--port", type=int, default=8050, help="port (0: any free port; the link printed says which)")
    p.add_argument("--allow-remote", action="store_true", help="allow binding to a non-loopback address; every request then needs the token")
    p.add_argument(
        "--token", default=None, help=f"the access token (default: ${TOKEN_ENV}, or one generated and printed); required with --allow-remote"
    )
    p.add_argument("--rpc-url", default=None, help="JSON-RPC URL of the chain whose SwarmCoordinator standings to show (with --contract)")
    p.add_argument("--contract", default=None, help="SwarmCoordinator address (default: $GENRL_SWARM_CONTRACT when --rpc-url is given)")
    p.add_argument("--peer-status", action="append", default=[], metavar="URL", help="a live peer's status endpoint (JSON); repeat for several")
    p.add_argument("--max-points", type=int, default=400, help="points per curve sent to the page (longer runs are averaged into this many buckets)")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def choose_token(args: argparse.Namespace, loopback: bool) -> tuple[str | None, bool]:
    """(token, generated). The loopback needs none unless one is given."""
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if token is not None and not TOKEN_PATTERN.match(token):
        raise DashboardError("the token must be 16-256 characters of A-Z a-z 0-9 _ . ~ -")
    if token is None and not loopback:
        return secrets.token_urlsafe(24), True
    return token, False


def check(args: argparse.Namespace) -> tuple[list[Path], bool]:
    """The run directories, and whether the bind address is the loopback."""
    loopback = is_loopback(args.host)
    if not loopback and not args.allow_remote:
        raise DashboardError(
            f"--host {args.host} is not the loopback: other machines could read the swarm's data; pass --allow-remote (a token is then required)"
        )
    if not args.run_dir and not args.rpc_url and not args.peer_status:
        raise DashboardError("nothing to show: give --run-dir DIR (e.g. runs/bandit), --rpc-url with --contract, or --peer-status URL")
    if not 0 <= args.port <= 65535:
        raise DashboardError(f"--port must be 0-65535, got {args.port}")
    if not 8 <= args.max_points <= 100_000:
        raise DashboardError(f"--max-points must be 8-100000, got {args.max_points}")
    runs = [Path(d).expanduser() for d in args.run_dir]
    for d in runs:
        if d.exists() and not d.is_dir():
            raise DashboardError(f"--run-dir {d} is not a directory")
    return runs, loopback


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as e:
        sock.close()
        raise DashboardError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def link(host: str, port: int, token: str | None) -> str:
    shown = f"[{host.strip('[]')}]" if ":" in host.strip("[]") else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def run(args: argparse.Namespace) -> int:
    try:
        import starlette  # noqa: F401 - only to say what to install
        import uvicorn
    except ImportError as e:
        print(f"genrl-swarm: dashboard: {e.name} is missing: pip install 'genrl-swarm[dashboard]'", file=sys.stderr)
        return 2
    try:
        runs, loopback = check(args)
        token, generated = choose_token(args, loopback)
        hub = _hub(args, runs)
        sock = bind(args.host, args.port)
    except (DashboardError, ValueError) as e:
        print(f"genrl-swarm: dashboard: {e}", file=sys.stderr)
        return 2
    from genrl_swarm.dashboard.server import create_app

    app = create_app(hub, token=token, loopback_only=loopback)
    port = sock.getsockname()[1]
    print(f"dashboard: {link(args.host, port, token)}", flush=True)
    if generated:
        print(f"the token was generated for this run (pass --token or ${TOKEN_ENV} to keep one)", flush=True)
    server = closing_server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2), hub)
    server.run(sockets=[sock])
    sock.close()
    return 128 + int(server.received) if server.received is not None else 0


def closing_server(config: Any, hub: Hub) -> Any:
    """A uvicorn server that ends the hub's event streams when it is asked to stop (Ctrl-C, SIGTERM).

    Why its own ``capture_signals``: uvicorn re-raises the signal once it has shut down, which
    turns Ctrl-C into a KeyboardInterrupt traceback. Here the signal is only recorded, and
    ``run`` exits with 128 + its number (130, 143) like ``genrl-swarm run``."""
    import uvicorn

    class _Server(uvicorn.Server):
        received: signal.Signals | None = None

        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.received = self.received or signal.Signals(sig)
            hub.close()
            super().handle_exit(sig, frame)

    return _Server(config)


def _hub(args: argparse.Namespace, runs: list[Path]) -> Hub:
    from genrl_swarm.dashboard.chain import ChainStandings
    from genrl_swarm.dashboard.hub import Hub
    from genrl_swarm.dashboard.runs import RunWatcher
    from genrl_swarm.dashboard.status import StatusPoller

    chain = None
    if args.rpc_url:
        contract = args.contract or os.environ.get("GENRL_SWARM_CONTRACT")
        if not contract:
            raise DashboardError("--rpc-url needs --contract 0x... (or $GENRL_SWARM_CONTRACT)")
        chain = ChainStandings(args.rpc_url, contract)
    status = StatusPoller(args.peer_status) if args.peer_status else None
    return Hub(RunWatcher(runs), chain=chain, status=status, max_points=args.max_points)
