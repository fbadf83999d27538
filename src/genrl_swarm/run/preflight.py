"""Checks a component can make before any peer is built: once per process, in seconds.

Why. A process builds its peers one after another, each loading its own model; a model that
cannot load (a typo in ``policy.model``, a directory without weights) used to surface only after
every peer had tried, minutes in, as one traceback per peer. A component class may define
``preflight(arguments)`` (a classmethod taking its recipe section's arguments, and, if it names
it, ``peers_here``: the peers this process hosts) that raises what its constructor would,
cheaply: ``LMPolicy.preflight`` checks that the model resolves and holds a config, a tokenizer
and weights. The launcher calls it for every section before it builds any.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from genrl_swarm.config import RecipeError, import_target
from genrl_swarm.run.loggers import missing


@runtime_checkable
class Preflighted(Protocol):
    """A component class that can check its arguments before it is built."""

    @classmethod
    def preflight(cls, arguments: Mapping[str, Any]) -> None: ...  # optionally also ``peers_here: int = 1``


def preflight(spec: Mapping[str, Any], peers_here: int = 1) -> None:
    """``preflight`` of each recipe section's component class that defines one, and the
    libraries ``run.loggers`` names (a tracker not installed). ``peers_here``: the peers this
    process hosts (a process-wide setting may depend on it: ``lm.heap``)."""
    if (rule := missing(spec.get("run", {}).get("loggers", ()))) is not None:
        raise RecipeError(f"run.loggers: {rule}")
    for section, node in spec.items():
        if not (isinstance(node, Mapping) and "_target_" in node):
            continue
        target = import_target(node["_target_"], f"{section}._target_")
        if isinstance(target, type) and isinstance(target, Preflighted):
            arguments = {k: v for k, v in node.items() if k != "_target_"}
            check: Callable[..., None] = target.preflight
            if "peers_here" in inspect.signature(check).parameters:
                check(arguments, peers_here=peers_here)
            else:  # a component's preflight written before ``peers_here`` existed
                check(arguments)
