"""The CPU devices a team's rollout and update are split over.

XLA on CPU runs a program on one core at these shapes: a PPO update of IPPO on LBF (32
environments x 128 steps, minibatches of 2,048 rows through 128-wide layers) kept 1.16 of 2
cores busy. JAX can present the host's cores as several CPU devices
(``--xla_force_host_platform_device_count``), and a ``shard_map`` over them runs each share of
the environments and of every minibatch on its own core, as Mava does over its devices: the
gradient is summed over the shares (``ppo``'s weighted means ``psum``), so it is the gradient
of the whole minibatch.

The flag must be in ``XLA_FLAGS`` before JAX starts its CPU backend, and Jumanji starts it at
import; so importing this package calls ``request``, which adds the flag (one device per core
this process may use) unless the user set it, and only while it still can. After that the
devices are whatever JAX has: a process that ran JAX before importing this package keeps one
device and runs unsplit. ``SystemConfig.devices`` says how many of them a team uses.
"""

from __future__ import annotations

import os
from typing import TypeVar

import jax
import numpy as np
from jax._src import xla_bridge  # whether the backend started (no public API)
from jax.sharding import Mesh

FLAG = "--xla_force_host_platform_device_count"
#: The mesh axis the environments and minibatch rows are split along.
AXIS = "devices"


def cores() -> int:
    """CPU cores this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def request(count: int | None = None) -> None:
    """Ask JAX for ``count`` CPU devices (default: one per core), if nobody chose a count and
    the backend has not started."""
    count = cores() if count is None else count
    flags = os.environ.get("XLA_FLAGS", "")
    if count > 1 and FLAG not in flags and not xla_bridge.backends_are_initialized():
        os.environ["XLA_FLAGS"] = f"{flags} {FLAG}={count}".strip()


def split(wanted: int, num_envs: int, rows_per_env: int, num_minibatches: int) -> int:
    """How many devices to split ``num_envs`` environments over: the most, up to ``wanted``
    (0: every CPU device JAX has), that divide the environments evenly and leave each device a
    whole share of every minibatch."""
    available = len(jax.devices("cpu"))
    limit = min(available, wanted or available)
    return max(d for d in range(1, limit + 1) if num_envs % d == 0 and (num_envs // d * rows_per_env) % num_minibatches == 0)


def mesh(count: int) -> Mesh | None:
    """A one-axis mesh over the first ``count`` CPU devices (None for one: run unsplit)."""
    return Mesh(jax.devices("cpu")[:count], (AXIS,)) if count > 1 else None


T = TypeVar("T")


def gathered(tree: T) -> T:
    """``tree``'s arrays (replicated over a mesh) as uncommitted arrays on the default device,
    like the results of an unsplit program: a committed copy would be a new input signature to
    every jitted function it is passed to (a second trace of each)."""
    return jax.tree.map(lambda x: jax.numpy.asarray(np.asarray(x)), tree)
