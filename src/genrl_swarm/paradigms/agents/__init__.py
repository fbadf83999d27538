"""Agents: the training side of tool-calling, multi-turn episodes — the policy that plays them
(``policy.py``), chat rendering, the episode loop, cross-policy sampling and the learner. The
environment they talk to (typed actions, the tool-call parser, tasks, sandbox, service) is
``genrl_swarm.envd``; this package imports it, never the other way round."""
