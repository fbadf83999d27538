"""The agent game: multi-turn tool-calling episodes (envd tasks) trained with multi-turn GRPO; see game.py and recipe.yaml."""

from genrl_swarm.games.agent.game import AgentData, AgentReward, agent_task

__all__ = ["AgentData", "AgentReward", "agent_task"]
