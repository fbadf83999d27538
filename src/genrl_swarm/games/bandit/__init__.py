"""The swarm bandit game: see game.py (the non-text template) and recipe.yaml."""

from genrl_swarm.games.bandit.game import ArmPulls, BanditData, BanditReward, SoftmaxLearner, SoftmaxPolicy

__all__ = ["ArmPulls", "BanditData", "BanditReward", "SoftmaxLearner", "SoftmaxPolicy"]
