"""Multi-agent RL game: IPPO/MAPPO teams on Jumanji LBF/RWARE sharing verified trajectories or parameters (see game.py)."""

from genrl_swarm.games.marl.game import MarlData, MarlLearner, MarlPolicy, MarlReward

__all__ = ["MarlData", "MarlLearner", "MarlPolicy", "MarlReward"]
