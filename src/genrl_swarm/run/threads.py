"""How many torch threads the peers of one process get: a budget that adds up to the cores.

Why a budget. torch's default is one intra-op thread per core *for every thread that calls into
torch*: each calling thread gets its own OpenMP team of ``torch.get_num_threads()`` workers.
The launcher runs every in-process peer in its own thread, so N peers with torch's default
keep N x cores threads spinning on cores; on a loaded 2-core machine one SmolLM2 forward took
4.4 s with 2 threads against 0.23 s with 1 (issue 33).

Why per peer and not one shared process budget. ``torch.set_num_threads`` is process-wide (every
thread of the process reads the same setting), but the threads it sets are not shared: they are
per calling thread. A "process budget" of all cores shared by N peers therefore means N x cores
threads whenever the peers compute at the same time, which they do (every peer generates and
trains in the same phase of a round). So each in-process peer gets ``max(1, cores // peers)``:
with peers >= cores, one thread each. The sum can still exceed the cores by the rounding up to
1 (3 peers on 2 cores: 3 threads); fewer threads than peers would leave a peer without any.

Where the number comes from, first match wins (:func:`thread_budget`):

1. the recipe key ``run.threads`` (> 0);
2. ``GENRL_SWARM_THREADS`` in the environment;
3. ``OMP_NUM_THREADS`` in the environment (the user's: torch reads it too);
4. a ``torch.set_num_threads(n)`` the user made before the launcher started (torch already
   imported with a count that is not one of torch's defaults);
5. ``max(1, cores // peers)``, cores from ``os.sched_getaffinity`` (what this process may use).

Processes of their own (torchrun ranks, HiveMind peers: one peer each) get all their cores.
Ray actors get ``round(cpus)`` of their own reservation (``pipeline.worker_cpus``,
``learner_cpus``), which Ray keeps within ``ray.num_cpus``. The LM sampler's ``threads`` (0 by
default) keeps the peer's budget. torch is never imported here: the budget is applied only when
torch is already in use (``sys.modules``), so a torchless run stays torchless.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

ENV = "GENRL_SWARM_THREADS"

#: The count this module last gave torch: a later launch in the same process (tests, notebooks)
#: must not mistake it for the user's own ``torch.set_num_threads``.
_applied: int | None = None


@dataclass(frozen=True)
class ThreadBudget:
    """torch threads for each peer of this process, and where the number came from."""

    threads: int  # torch.set_num_threads for the process = each peer thread's OpenMP team
    cores: int  # cores this process may run on
    peers: int  # peers hosted in this process
    source: str  # "cores", "run.threads", GENRL_SWARM_THREADS, OMP_NUM_THREADS or "torch.set_num_threads"

    def describe(self) -> str:
        where = (
            f"{self.cores} cores // {self.peers} peer{'s' if self.peers != 1 else ''} in this process"
            if self.source == "cores"
            else f"from {self.source}"
        )
        total = self.threads * self.peers
        over = f"; {total} threads on {self.cores} cores" if total > self.cores else ""
        return f"torch threads: {self.threads} per peer ({where}{over}; set {ENV} to change)"


def available_cores() -> int:
    """The cores this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def _positive(value: str | None, name: str) -> int | None:
    if value is None or not value.strip():
        return None
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"{name} must be a positive integer, got {value!r}") from None
    if n < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return n


def thread_budget(cores: int, peers: int, requested: int = 0, env: Mapping[str, str] | None = None, torch_threads: int | None = None) -> ThreadBudget:
    """The torch threads each of ``peers`` peers in one process gets on ``cores`` cores.

    ``requested`` is the recipe's ``run.threads`` (0: not set); ``env`` the environment
    (``os.environ`` when None); ``torch_threads`` a count the user gave torch before the launch
    (None: none, or torch not imported). Pure: reads nothing but its arguments."""
    if cores < 1 or peers < 1:
        raise ValueError(f"cores and peers must be >= 1, got {cores} and {peers}")
    if requested < 0:
        raise ValueError(f"run.threads must be >= 0, got {requested}")
    env = os.environ if env is None else env
    if requested:
        return ThreadBudget(requested, cores, peers, "run.threads")
    for name in (ENV, "OMP_NUM_THREADS"):
        if (n := _positive(env.get(name), name)) is not None:
            return ThreadBudget(n, cores, peers, name)
    if torch_threads is not None and torch_threads >= 1:
        return ThreadBudget(torch_threads, cores, peers, "torch.set_num_threads")
    return ThreadBudget(max(1, cores // peers), cores, peers, "cores")


def _users_torch_threads() -> int | None:
    """A count the user gave torch before the launch: torch imported, and its count neither one
    torch picks by itself (the cores it sees) nor the one this module applied last."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    n = int(torch.get_num_threads())
    defaults = {available_cores(), os.cpu_count() or 0}
    return None if n in defaults or n == _applied else n


def apply(budget: ThreadBudget) -> bool:
    """Give torch the budget when torch is in use in this process; True if it was applied."""
    global _applied
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    if torch.get_num_threads() != budget.threads:
        torch.set_num_threads(budget.threads)
    _applied = budget.threads
    return True


def budget_for(peers: int, requested: int = 0) -> ThreadBudget:
    """The budget of this process (its cores, its environment, torch's state before the launch)."""
    return thread_budget(available_cores(), peers, requested, os.environ, _users_torch_threads())


def settle(budget: ThreadBudget) -> None:
    """Apply the budget and log it once: the launcher calls this when its peers are built (a
    launch refused before that prints its one-line error alone). A run without torch (bandit,
    MARL) has nothing to apply it to and logs it only at debug level."""
    log.log(logging.INFO if apply(budget) else logging.DEBUG, "%s", budget.describe())
