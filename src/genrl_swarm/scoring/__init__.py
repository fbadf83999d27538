"""Scoring a stranger's text safely: audited scorers in-process, every other one sandboxed."""

from genrl_swarm.scoring.jobs import ScorerFailed, ScorerLimits
from genrl_swarm.scoring.registry import Audit, Scorer

__all__ = ["Audit", "Scorer", "ScorerFailed", "ScorerLimits"]
