"""``connect``: an environment client by address, in-process or over gRPC.

Its own module so that ``api`` (the interface every client implements) imports no client: the
clients import ``api``, and grpc is imported only when a remote address is asked for."""

from __future__ import annotations

from typing import Any

from genrl_swarm.envd.api import EnvClient


def connect(address: str = "local", **options: Any) -> EnvClient:
    """``"local"``: in-process (options: ``config=EnvdConfig(...)``); ``"host:port"``: a running
    ``genrl-swarm envd`` (options: ``timeout`` seconds per call)."""
    if address == "local":
        from genrl_swarm.envd.local import LocalEnv

        return LocalEnv(**options)
    from genrl_swarm.envd.client import RemoteEnv

    return RemoteEnv(address, **options)
