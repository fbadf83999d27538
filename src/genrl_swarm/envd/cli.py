"""``genrl-swarm envd``: its arguments and its entry point (grpc is imported only when it runs)."""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys

from genrl_swarm.envd.controller import EnvdConfig
from genrl_swarm.envd.errors import CannotServe
from genrl_swarm.envd.host import HostConfig

EXIT_CONFIG = 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to bind (no auth or TLS: keep it private; default loopback)")
    p.add_argument("--port", type=int, default=50051, help="0: any free port (the bound one is printed)")
    p.add_argument("--workers", type=int, default=2, help="worker processes that hold sessions")
    p.add_argument("--sandboxes", type=int, default=2, help="sandboxed tool processes per worker")
    p.add_argument("--max-sessions", type=int, default=10_000)
    p.add_argument("--ttl", type=float, default=600.0, help="seconds a session may stay idle before it is closed")
    p.add_argument("--max-turns", type=int, default=16, help="turns per episode (default and ceiling)")
    p.add_argument("--openenv", action="store_true", help="speak OpenEnv's reset/step/state (WebSocket /ws, HTTP) instead of gRPC (extra: openenv)")
    p.add_argument(
        "--tasks", default="", help="comma-separated tasks to offer (default: the packaged ones and every installed plug-in task; also: probe)"
    )


def run(args: argparse.Namespace) -> int:
    """Serve until stopped (130/143). A bad flag is one line here (exit 2); an address it cannot
    listen on is ``CannotServe`` and a disk that refuses a write an ``OSError``, both printed in
    one line by the command (``run/failures.py``)."""
    try:
        host = HostConfig(tasks=tuple(t for t in args.tasks.split(",") if t), sandboxes=args.sandboxes, max_turns=args.max_turns)
        config = EnvdConfig(workers=args.workers, max_sessions=args.max_sessions, ttl=args.ttl, host=host)
    except ValueError as e:
        print(f"genrl-swarm: envd: {e}", file=sys.stderr)
        return EXIT_CONFIG
    check_address(args.host, args.port)  # before any worker starts, and before grpc logs lines of its own
    if args.openenv:
        try:
            from genrl_swarm.envd.openenv import serve_openenv
        except ImportError as e:
            print(f"genrl-swarm: envd: --openenv needs the openenv extra (pip install 'genrl-swarm[openenv]'): {e}", file=sys.stderr)
            return EXIT_CONFIG
        serve_openenv(config, args.host, args.port)
        return 0
    from genrl_swarm.envd.server import serve

    return asyncio.run(serve(config, args.host, args.port))  # 130/143: stopped by a signal


def check_address(host: str, port: int) -> None:
    """Raise CannotServe when ``host:port`` cannot be bound now (port 0, any free one, always can)."""
    if port == 0:
        return
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed server's TIME_WAIT is no obstacle
            probe.bind((host, port))
    except OSError as e:
        why = e.strerror or str(e)
        raise CannotServe(f"cannot listen on {host}:{port}: {why}: stop what holds it, or pass another --port (0: any free port) or --host") from None
