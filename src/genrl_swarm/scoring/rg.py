"""Reasoning Gym answers scored under the one rule: the scorers written here in-process
(``rg_exact``), every other dataset's own scorer in the sandbox (``rg_sandboxed``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from genrl_swarm.scoring.registry import Audit, Scorer
from genrl_swarm.scoring.rg_exact import CONFIGURED, EXACT

_EXACT = {name: Scorer(f"genrl_swarm.scoring.rg_exact:{fn.__name__}", Audit.OURS) for name, fn in EXACT.items()}
_SANDBOXED = Scorer("genrl_swarm.scoring.rg_sandboxed:score")


def where(dataset: str) -> Audit:
    """Where ``dataset``'s answers are scored."""
    return _EXACT[dataset].audit if dataset in _EXACT else _SANDBOXED.audit


def score_entry(dataset: str, answer: str | None, entry: Mapping[str, Any], config: Mapping[str, Any]) -> float:
    """Reasoning Gym's score of ``answer`` for ``entry``, clamped to [0, 1]: a sandboxed scorer
    that runs answer text (``eval``) can be made to return anything for that body, never more
    than a correct answer gets."""
    if dataset in _EXACT:
        value = _EXACT[dataset](answer, entry, config) if dataset in CONFIGURED else _EXACT[dataset](answer, entry)
    else:
        value = _SANDBOXED(dataset, dict(config), answer, dict(entry))
    return min(1.0, max(0.0, value))
