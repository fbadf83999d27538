"""The swarm bandit game: see game.py (the template) and recipe.yaml."""

from genrl_swarm.games.bandit.game import BanditData, BanditReward, SoftmaxPolicyTrainer

__all__ = ["BanditData", "BanditReward", "SoftmaxPolicyTrainer"]
