"""GenRL-Swarm: multi-agent, multi-stage RL across a swarm of peers."""

__version__ = "0.1.0"
