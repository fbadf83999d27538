"""The CPU devices a team's rollout and update are split over.

One XLA program keeps ~1.75 of 2 cores busy here at these shapes (a PPO update of IPPO on LBF:
32 environments x 128 steps, minibatches of 2,048 rows through 128-wide layers). JAX can present
the host's cores as several CPU devices (``--xla_force_host_platform_device_count``), and a
``shard_map`` over them runs each share of the environments and of every minibatch on its own
core, as Mava splits over its devices: 1.07x steady steps/s here, Mava's own split 1.08x. Every
weighted mean of the losses sums its numerator and its weight over the shares (``ppo``), so the
gradient is the whole minibatch's. On a GPU backend nothing is split.

The flag must be in ``XLA_FLAGS`` before JAX starts its CPU backend, and Jumanji starts it at
import; so importing this package calls ``request``, which adds the flag (one device per core
this process may use) unless the user set it, and only while it still can. After that the
devices are whatever JAX has: a process that ran JAX before importing this package keeps one
device and runs unsplit. ``SystemConfig.devices`` says how many of them a team uses. JAX is
imported inside the functions: the package imports this module first, and its pure modules
(``config``, ``logs``) import without JAX.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from jax.sharding import Mesh

FLAG = "--xla_force_host_platform_device_count"
#: The mesh axis the environments and minibatch rows are split along.
AXIS = "devices"
T = TypeVar("T")


def cores() -> int:
    """CPU cores this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def request(count: int | None = None) -> None:
    """Ask JAX for ``count`` CPU devices (default: one per core), if nobody chose a count and
    the backend has not started."""
    count = cores() if count is None else count
    flags = os.environ.get("XLA_FLAGS", "")
    bridge = sys.modules.get("jax._src.xla_bridge")  # loaded only once JAX is imported
    started = bridge is not None and bridge.backends_are_initialized()
    if count > 1 and FLAG not in flags and not started:
        os.environ["XLA_FLAGS"] = f"{flags} {FLAG}={count}".strip()


def split(wanted: int, num_envs: int, rows_per_env: int, num_minibatches: int) -> int:
    """How many devices to split ``num_envs`` environments over: the most, up to ``wanted``
    (0: every CPU device JAX has), that divide the environments evenly and leave each device a
    whole share of every minibatch; 1 when JAX computes on anything but the CPU."""
    import jax

    if jax.default_backend() != "cpu":
        return 1
    available = len(jax.devices("cpu"))
    limit = min(available, wanted or available)
    return max(d for d in range(1, limit + 1) if divides(d, num_envs, rows_per_env, num_minibatches))


def divides(count: int, num_envs: int, rows_per_env: int, num_minibatches: int) -> bool:
    """Whether ``count`` devices each get a whole share of the environments and of every minibatch."""
    return num_envs % count == 0 and (num_envs // count * rows_per_env) % num_minibatches == 0


def mesh(count: int) -> Mesh | None:
    """A one-axis mesh over the first ``count`` CPU devices (None for one: run unsplit)."""
    import jax
    from jax.sharding import Mesh

    return Mesh(jax.devices("cpu")[:count], (AXIS,)) if count > 1 else None


def gathered(tree: T) -> T:
    """``tree``'s arrays (replicated over a mesh) as uncommitted arrays on the default device,
    like the results of an unsplit program: a committed copy would be a new input signature to
    every jitted function it is passed to (a second trace of each)."""
    import jax
    import numpy as np

    return jax.tree.map(lambda x: jax.numpy.asarray(np.asarray(x)), tree)
