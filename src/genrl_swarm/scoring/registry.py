"""The one rule for scorers: code we did not write never sees a stranger's text in our process.

A ``Scorer`` names a function (``module:function``) and whether this project wrote and audited
it. ``Scorer.__call__`` is the only place scoring code is dispatched: an audited scorer runs
in-process; any other (a library's, a user's plug-in) runs in the scorer sandbox
(``scoring.pool``), cut off by the sender's remaining CPU budget and charged to it. A user's
scorer is sandboxed unless they declare it audited themselves.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from genrl_swarm.sandbox import jail
from genrl_swarm.scoring import pool
from genrl_swarm.scoring.jobs import ScorerLimits
from genrl_swarm.scoring.pool import shared_pool
from genrl_swarm.scoring.targets import resolve


class Audit(enum.Enum):
    OURS = enum.auto()  # written and audited in this project: runs in the peer's process
    SANDBOXED = enum.auto()  # anything else: runs in the scorer sandbox


@dataclass(frozen=True)
class Scorer:
    """``target(*args) -> float``, run where its audit says."""

    target: str
    audit: Audit = Audit.SANDBOXED

    def __post_init__(self) -> None:
        module, colon, name = self.target.partition(":")
        if not (module and colon and name.isidentifier()):
            raise ValueError(f"a scorer is named 'package.module:function', got {self.target!r}")

    def __call__(self, *args: Any) -> float:
        if self.audit is Audit.OURS:
            return float(resolve(self.target)(*args))
        return shared_pool(_limits, SANDBOX_MODULES).call(self.target, *args)


#: Modules the sandbox's zygote imports before it forks workers (their import is never on a
#: sender's clock). A plug-in scorer's module not listed here is imported on its first call.
SANDBOX_MODULES: tuple[str, ...] = ("genrl_swarm.scoring.rg_sandboxed",)
_limits = ScorerLimits()


def _pool_started() -> bool:
    return pool.started()


def limits_from(fields: Mapping[str, Any]) -> ScorerLimits:
    """A recipe's ``sandbox`` mapping as limits; ValueError names a wrong key or type."""
    try:
        return msgspec.convert(dict(fields), ScorerLimits)
    except msgspec.ValidationError as e:
        raise ValueError(f"sandbox: {e}") from None


def configure(limits: ScorerLimits, modules: tuple[str, ...] = ()) -> None:
    """Limits and extra modules to preload for the process's sandbox. Effective before its first
    call; after it, limits that differ are refused (peers of one process share the sandbox)."""
    global _limits, SANDBOX_MODULES, _configured
    if _pool_started() and limits != _limits:
        raise ValueError(f"the scorer sandbox of this process already runs with {_limits}; every peer of a process shares it")
    _limits, SANDBOX_MODULES, _configured = limits, tuple(dict.fromkeys((*SANDBOX_MODULES, *modules))), True
    if modules:
        need_sandbox(f"the plug-in scorer module {modules[0]}")
    _check_confinement()


#: What this process will run in the sandbox (datasets, plug-in scorers), recorded when built;
#: whether a reward manager configured it yet (its ``unconfined`` is known from then on).
_needed: list[str] = []
_configured = False


def need_sandbox(why: str) -> None:
    """Record that ``why`` (e.g. a dataset's scorer) runs in the sandbox: ``configure`` (which the
    reward manager calls once built, after the data) refuses to go on where the kernel cannot
    build the sandbox, unless the recipe's ``sandbox.unconfined`` says the operator accepts it."""
    _needed.append(why)
    if _configured:
        _check_confinement()


def _check_confinement() -> None:
    if not _needed or _limits.unconfined or not (why := jail.probe()):
        return
    raise ValueError(
        f"sandbox: {_needed[0]} runs third-party code on strangers' text, and the kernel cannot build its sandbox here "
        f"({why}); allow user namespaces, or set reward.sandbox.unconfined=true to run it without (not recommended)"
    )
