"""The chain key leaves the environment before any child process starts.

A child inherits its parent's environment: a sandboxed scorer, a tool sandbox, the p2pd daemon,
a Ray worker, a torchrun rank. A key passed as ``GENRL_SWARM_PRIVATE_KEY`` is therefore moved
out of ``os.environ`` (which also unsets it for every child started afterwards) into this
process's memory at the first thing the command line and the Python API do (``take``); the EVM
coordinator reads it from there (``lookup``). A key in a file (``coordinator.key_file``) is
never in any environment at all, and is the better choice.
"""

from __future__ import annotations

import os

KEY_ENV = "GENRL_SWARM_PRIVATE_KEY"
_taken: dict[str, str] = {}


def take(names: tuple[str, ...] = (KEY_ENV,)) -> None:
    """Move each variable in ``names`` from the environment into this process's memory."""
    for name in names:
        value = os.environ.pop(name, None)
        if value:
            _taken[name] = value


def lookup(name: str = KEY_ENV) -> str | None:
    """The variable's value: taken earlier, or still in the environment (taken now)."""
    take((name,))
    return _taken.get(name)
