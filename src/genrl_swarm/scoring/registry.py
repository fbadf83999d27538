"""The one rule for scorers: code we did not write never sees a stranger's text in our process.

A ``Scorer`` names a function (``module:function``) and whether this project wrote and audited
it. ``Scorer.__call__`` is the only place scoring code is dispatched: an audited scorer runs
in-process; any other (a library's, a user's plug-in) runs in the scorer sandbox
(``scoring.pool``), cut off by the sender's remaining CPU budget and charged to it. A user's
scorer is sandboxed unless they declare it audited themselves.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

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


def configure(limits: ScorerLimits, modules: tuple[str, ...] = ()) -> None:
    """Limits and extra modules for the process's sandbox (before its first call)."""
    global _limits, SANDBOX_MODULES
    _limits, SANDBOX_MODULES = limits, tuple(dict.fromkeys((*SANDBOX_MODULES, *modules)))
