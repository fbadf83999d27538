"""The chain key leaves the environment before any child process starts.

A child inherits its parent's environment: a sandboxed scorer, a tool sandbox, the p2pd daemon,
a Ray worker, a torchrun rank. A key passed as ``GENRL_SWARM_PRIVATE_KEY`` is therefore moved
out of ``os.environ`` (which also unsets it for every child started afterwards) into this
process's memory at the first thing the command line, the demos and the Python API do
(``take``); the EVM coordinator reads it from there (``lookup``). Unsetting is not enough: the
kernel keeps showing the environment the process started with (``/proc/<pid>/environ``, the
block at the top of its stack) to any process of the same user, so ``take`` also overwrites the
value there. A key in a file (``coordinator.key_file``) is never in any environment at all, and
is the better choice.
"""

from __future__ import annotations

import ctypes
import os

KEY_ENV = "GENRL_SWARM_PRIVATE_KEY"
_taken: dict[str, str] = {}


def take(names: tuple[str, ...] = (KEY_ENV,)) -> None:
    """Move each variable in ``names`` from the environment into this process's memory."""
    for name in names:
        value = os.environ.pop(name, None)
        if value:
            _taken[name] = value
            _scrub(name)


def _scrub(name: str) -> None:
    """Overwrite ``name``'s value in the environment block the process started with (what
    /proc/self/environ shows), between the addresses the kernel gives in /proc/self/stat."""
    try:
        with open("/proc/self/stat", "rb") as f:
            start = int(f.read().rpartition(b")")[2].split()[47])  # env_start: field 50 of stat
        with open("/proc/self/environ", "rb") as f:
            block = f.read()
    except (OSError, IndexError, ValueError):
        return  # not Linux: no such block to read either
    prefix, at = name.encode() + b"=", 0
    while (at := block.find(prefix, at)) >= 0:
        if at == 0 or block[at - 1] == 0:  # a variable's start, not the middle of another's value
            end = block.find(b"\0", at)
            size = (end if end >= 0 else len(block)) - at - len(prefix)
            ctypes.memset(start + at + len(prefix), ord("x"), size)
        at += len(prefix)


def lookup(name: str = KEY_ENV) -> str | None:
    """The variable's value: taken earlier, or still in the environment (taken now)."""
    take((name,))
    return _taken.get(name)
