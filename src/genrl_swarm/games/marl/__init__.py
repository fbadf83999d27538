"""Multi-agent RL game: IPPO/MAPPO teams on Jumanji LBF/RWARE sharing verified trajectories or
parameters (see game.py; the policy and learner are ``genrl_swarm.paradigms.marl``)."""

from genrl_swarm.games.marl.game import MarlData, MarlReward

__all__ = ["MarlData", "MarlReward"]
