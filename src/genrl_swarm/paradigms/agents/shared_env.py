"""One environment client per address for the whole process.

Why shared: the in-process environment (``connect("local")``) starts worker processes and
sandbox children. Peers of one process (the in-memory swarm) and each peer's policy and reward
manager all need one; a set each would multiply the processes on a machine that runs the
models too. The clients are thread-safe (LocalEnv hands every call to its own loop thread), so
sharing costs nothing. They are shut down when the process exits.
"""

from __future__ import annotations

import atexit
import threading

from genrl_swarm.envd.api import EnvClient
from genrl_swarm.envd.connect import connect

_CLIENTS: dict[str, EnvClient] = {}
_LOCK = threading.Lock()


def shared_env(address: str = "local") -> EnvClient:
    """The process's client for ``address`` ("local" or "host:port"), created on first use."""
    with _LOCK:
        client = _CLIENTS.get(address)
        if client is None:
            client = _CLIENTS[address] = _connect(address)
        return client


def _connect(address: str) -> EnvClient:
    if address != "local":
        return connect(address)
    from genrl_swarm.envd.controller import EnvdConfig
    from genrl_swarm.envd.host import HostConfig

    return connect("local", config=EnvdConfig(workers=1, host=HostConfig(sandboxes=1)))


@atexit.register
def close_all() -> None:
    """Shut every shared client down (worker processes included)."""
    with _LOCK:
        clients = list(_CLIENTS.values())
        _CLIENTS.clear()
    for client in clients:
        client.shutdown()
