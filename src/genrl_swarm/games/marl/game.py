"""Multi-agent RL in the swarm: each peer trains its own team with IPPO or MAPPO on a Jumanji
environment (Level-Based Foraging, Robot Warehouse) and shares, each round, its trajectories
or its parameters.

A round is one PPO update. Its task is a seed: every peer resets ``num_envs`` environments from
it and plays ``rollout_length`` steps with its own policy (``MarlPolicy.act``). What crosses the
wire is the typed ``Trajectory`` (observations, actions, rewards, dones, masks, behaviour
log-probs) or a ``ParamsBody`` (``policy.share``). A received trajectory is replayed from the
task's seed with its actions before anything uses it (``MarlPolicy.check``): any mismatch
refuses it, counted against the sender. Received parameters must match this team's shapes and
dtypes, be finite and near this peer's own (relative to each array's norm); they are combined
by a coordinate-wise median. Rewards are this peer's replay of the environment
(``MarlReward``). The learner trains on its own rollout plus the verified ones (off-policy
weighted), or on its own after averaging in the peers' parameters.

The machinery (networks, GAE/PPO, wrappers, replay) lives in ``genrl_swarm.paradigms.marl``; this file
only plugs it into the loop; the policy and learner are ``paradigms.marl.policy`` and ``.learner``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax

from genrl_swarm.core import DataManager, RewardManager, Rollout, StageInput, Task
from genrl_swarm.paradigms.marl import sharing
from genrl_swarm.paradigms.marl.bodies import Trajectory
from genrl_swarm.paradigms.marl.config import EnvConfig, SystemConfig, derive_seed
from genrl_swarm.paradigms.marl.replay import env_keys, verifier_for
from genrl_swarm.paradigms.marl.team import mean_return, team_for


class MarlData(DataManager):
    """One task per round: a seed for the round's environments, and what they are."""

    def __init__(self, env: EnvConfig | Mapping[str, Any], num_envs: int = 16, rollout_length: int = 128, seed: int = 0) -> None:
        self.env, self.num_envs, self.rollout_length, self.seed = EnvConfig.of(env), num_envs, rollout_length, seed

    def round_tasks(self, round: int) -> list[Task]:
        public = {
            "seed": derive_seed(self.seed, "round", round), "env": self.env.env_name, "scenario": self.env.task.name,
            "num_envs": self.num_envs, "steps": self.rollout_length,
        }  # fmt: skip
        return [Task.create(f"{self.env.env_name} {self.env.task.name} round {round}", public=public)]


class MarlReward(RewardManager):
    """A body's mean team return, as this peer measures it: its own replay of a trajectory, or
    the sent parameters played on the task's environments."""

    def __init__(self, env: EnvConfig | Mapping[str, Any], system: SystemConfig | Mapping[str, Any]) -> None:
        self.env, self.system = EnvConfig.of(env), SystemConfig.of(system)

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        ctx, body = input.context, rollout.body
        if isinstance(body, Trajectory):
            return [verifier_for(self.env, ctx["num_envs"], ctx["steps"]).verify(body, ctx["seed"]).mean_return()]
        team = team_for(self.env, self.system)
        params = sharing.unflatten(team.template, body)
        played = team.collect(params.actor, env_keys(ctx["seed"], ctx["num_envs"]), jax.random.PRNGKey(ctx["seed"]), steps=ctx["steps"])
        s = jax.device_get(played.steps)
        return [mean_return(s.done, s.returned, s.reward)]
