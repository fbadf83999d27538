"""Reasoning Gym's ``spiral_matrix`` scorer in a real scorer sandbox: it ``eval``s the answer
text, which makes it the plainest way for a test to run a stranger's code in a worker."""

from __future__ import annotations

from typing import Any

from genrl_swarm.core.meter import metered
from genrl_swarm.scoring import ScorerFailed, ScorerLimits
from genrl_swarm.scoring.pool import ScorerPool

SPIRAL = "genrl_swarm.scoring.rg_sandboxed:score"


def spiral_pool() -> ScorerPool:
    """A pool as the tests use it: 1 s of CPU per call, a wide wall clock, two calls at once."""
    return ScorerPool(ScorerLimits(cpu_seconds=1.0, wall_seconds=60.0, workers=2), ("genrl_swarm.scoring.rg_sandboxed",))


def spiral_entry() -> dict[str, Any]:
    import reasoning_gym

    return dict(reasoning_gym.create_dataset("spiral_matrix", size=1, seed=3)[0])


def spiral(pool: ScorerPool, entry: dict[str, Any], answer: str, sender: str = "evil", budget: float = 2.0) -> tuple[float | str, float]:
    """(score or the failure, seconds charged to ``sender``)."""
    with metered(sender, budget) as m:
        try:
            return pool.call(SPIRAL, "spiral_matrix", {}, answer, entry), m.spent
        except ScorerFailed as e:
            return str(e), m.spent
