"""Core: the types, interfaces and loop every peer shares. Imports nothing heavy."""

from genrl_swarm.core.game import GameConfig, GameManager, Hooks
from genrl_swarm.core.interfaces import (
    Communication,
    Coordinator,
    DataManager,
    ExchangeResult,
    RewardManager,
    Trainer,
)
from genrl_swarm.core.state import GameState
from genrl_swarm.core.types import (
    FORMAT_VERSION,
    Envelope,
    Rollout,
    RoundResult,
    RoundRewards,
    ScoredRollout,
    Task,
    content_id,
)

__all__ = [
    "FORMAT_VERSION",
    "Communication",
    "Coordinator",
    "DataManager",
    "Envelope",
    "ExchangeResult",
    "GameConfig",
    "GameManager",
    "GameState",
    "Hooks",
    "RewardManager",
    "Rollout",
    "RoundResult",
    "RoundRewards",
    "ScoredRollout",
    "Task",
    "Trainer",
    "content_id",
]
