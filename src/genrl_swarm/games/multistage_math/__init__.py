"""Multistage math: answer, judge the swarm's answers, revise. See game.py and recipe.yaml."""

from genrl_swarm.games.multistage_math.game import MultistageMathData, MultistageReward

__all__ = ["MultistageMathData", "MultistageReward"]
