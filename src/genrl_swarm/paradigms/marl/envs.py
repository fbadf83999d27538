"""Jumanji's LevelBasedForaging-v0 and RobotWarehouse-v0, wrapped once for the trainers.

The wrapper gives every step the same shape whatever the environment: each agent's view as
float32 with a one-hot agent id appended (agents share one network, the id tells them apart),
the action mask, one reward per agent (the team's sum, or each agent's own), and ``done``.
It resets an environment by itself when an episode ends, from a key carried in its state: a
rollout is then a pure function of (first key, actions), which is what lets a peer replay
another peer's trajectory exactly (``marl.replay``).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import jumanji
from jumanji.environments.routing.lbf.generator import RandomGenerator as LbfGenerator
from jumanji.environments.routing.robot_warehouse.generator import RandomGenerator as RwareGenerator

from genrl_swarm.paradigms.marl.config import EnvConfig

GENERATORS = {"lbf": LbfGenerator, "rware": RwareGenerator}


class EnvState(NamedTuple):
    """One environment: jumanji's state, the key of its next reset, and the running episode."""

    inner: Any
    reset_key: jax.Array
    episode_return: jax.Array  # team return so far, float32 []
    episode_length: jax.Array  # int32 []


class Step(NamedTuple):
    """What the agents see after a step (or a reset). ``obs`` and ``action_mask`` belong to the
    next decision (the new episode's first one when ``done``); ``reward``/``done`` to the step
    just taken. ``returned``/``length`` are the finished episode's, valid where ``done``."""

    obs: jax.Array  # float32 [agents, obs_dim]
    action_mask: jax.Array  # bool [agents, actions]
    reward: jax.Array  # float32 [agents]
    done: jax.Array  # bool []
    returned: jax.Array  # float32 []
    length: jax.Array  # int32 []


class MultiAgentEnv:
    """A jumanji multi-agent environment behind the two calls a trainer needs; vectorise with
    ``jax.vmap(env.reset)`` / ``jax.vmap(env.step)``."""

    def __init__(self, config: EnvConfig) -> None:
        self.config = config
        generator = GENERATORS[config.task.family](**config.task.task_config)
        self.env: Any = jumanji.make(config.env_name, generator=generator, time_limit=config.time_limit, **config.kwargs)  # LBF or RWARE
        self.num_agents: int = int(getattr(self.env, "num_agents"))
        self.num_actions: int = int(self.env.action_spec.num_values[0])

    @cached_property
    def view_dim(self) -> int:
        return int(self.env.observation_spec.agents_view.shape[-1])

    @property
    def obs_dim(self) -> int:
        return self.view_dim + self.num_agents

    def _observe(self, observation: Any) -> tuple[jax.Array, jax.Array]:
        view = observation.agents_view.reshape(self.num_agents, -1).astype(jnp.float32)
        ids = jnp.eye(self.num_agents, dtype=jnp.float32)
        return jnp.concatenate([view, ids], axis=-1), observation.action_mask.astype(bool)

    def _rewards(self, raw: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(per-agent rewards, the team's reward). LBF rewards each agent, RWARE the team."""
        raw = raw.astype(jnp.float32)
        team = raw.sum() if raw.ndim else raw
        shared = self.config.team_reward or raw.ndim == 0
        return (jnp.full((self.num_agents,), team) if shared else raw), team

    def reset(self, key: jax.Array) -> tuple[EnvState, Step]:
        reset_key, key = jax.random.split(key)
        inner, timestep = self.env.reset(key)
        obs, mask = self._observe(timestep.observation)
        zero = jnp.zeros((), jnp.float32)
        state = EnvState(inner, reset_key, zero, jnp.zeros((), jnp.int32))
        return state, Step(obs, mask, jnp.zeros((self.num_agents,), jnp.float32), jnp.zeros((), bool), zero, state.episode_length)

    def _advance(self, state: EnvState, actions: jax.Array) -> tuple[EnvState, Step]:
        """One step, without the automatic reset (the observation may be a terminal one)."""
        inner, timestep = self.env.step(state.inner, actions)
        reward, team = self._rewards(timestep.reward)
        returned, length = state.episode_return + team, state.episode_length + 1
        obs, mask = self._observe(timestep.observation)
        return EnvState(inner, state.reset_key, returned, length), Step(obs, mask, reward, timestep.last(), returned, length)

    def _restart(self, state: EnvState, step: Step) -> tuple[EnvState, Step]:
        """Where the episode just ended, a fresh one from ``state.reset_key`` (its first view)."""
        fresh, first = self.reset(state.reset_key)
        state = jax.tree.map(lambda a, b: jnp.where(step.done, a, b), fresh, state)
        return state, step._replace(
            obs=jnp.where(step.done, first.obs, step.obs), action_mask=jnp.where(step.done, first.action_mask, step.action_mask)
        )

    def step(self, state: EnvState, actions: jax.Array) -> tuple[EnvState, Step]:
        """Step one environment; when the episode ends, the next observation is a fresh
        episode's first (reset from ``state.reset_key``), so a rollout never stops."""
        return self._restart(*self._advance(state, actions))

    def step_all(self, states: EnvState, actions: jax.Array) -> tuple[EnvState, Step]:
        """``step`` for a batch of environments, computing resets only on steps where some
        episode ended: under ``vmap`` a per-environment branch runs both sides every step, and
        a reset costs about as much as a step. Same results as ``jax.vmap(step)``."""
        stepped, steps = jax.vmap(self._advance)(states, actions)
        return jax.lax.cond(steps.done.any(), jax.vmap(self._restart), lambda s, t: (s, t), stepped, steps)
