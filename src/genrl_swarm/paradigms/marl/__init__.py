"""Multi-agent RL in JAX: IPPO/MAPPO teams on Jumanji's LBF and RWARE, and checking peers' trajectories by replay.

One job per module: ``policy`` (``MarlPolicy``: act, share, check), ``learner`` (``MarlLearner``:
one PPO update a round, evaluation), ``config`` (typed env/system records), ``envs`` (the wrapper), ``networks``,
``ppo`` (GAE and losses), ``team`` (the compiled rollout/update/learn), ``replay`` (trajectory
bodies and their verification), ``sharing`` (parameter bodies), ``logs`` (marl-eval JSON),
``report`` (table and curve). JAX and Jumanji are imported here and in ``games.marl`` only.
"""

from genrl_swarm.paradigms.marl import devices

devices.request()  # before anything starts JAX's CPU backend (Jumanji does, at import)
