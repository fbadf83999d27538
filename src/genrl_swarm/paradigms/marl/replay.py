"""Trajectories on the wire, and checking a peer's by replaying the environment.

A rollout of a swarm round starts from environments reset with keys derived from the task's
seed, and the wrapper resets finished episodes from keys carried in its state: everything the
environment did is a function of (task seed, actions). A receiving peer therefore re-runs the
environment with the sender's actions and compares observations, action masks, rewards and
dones; any difference, or a shape, dtype, length or action out of range, refuses the body. The
receiver trains on what *it* replayed (its own rewards), never on the sender's numbers; only
the behaviour log-probs cannot be checked, and their effect is bounded (``SystemConfig.is_cap``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from functools import lru_cache
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from genrl_swarm.core.bodies import Array, ArraySpec
from genrl_swarm.paradigms.marl import cache as compilation_cache
from genrl_swarm.paradigms.marl.bodies import Trajectory
from genrl_swarm.paradigms.marl.config import EnvConfig
from genrl_swarm.paradigms.marl.envs import EnvState, MultiAgentEnv
from genrl_swarm.paradigms.marl.team import Batch, Rollout, mean_return

#: Float fields must match to this tolerance (XLA may fuse differently on another CPU).
RTOL, ATOL = 1e-5, 1e-6


def env_keys(seed: int, num_envs: int) -> jax.Array:
    """The reset keys of a task's environments: the same on every peer."""
    return jax.random.split(jax.random.PRNGKey(seed), num_envs)


def trajectory_spec(env: MultiAgentEnv, num_envs: int) -> dict[str, ArraySpec]:
    """What every field of this game's trajectories must be, per step."""
    agents = (num_envs, env.num_agents)
    return {
        "observations": ArraySpec("float32", (*agents, env.obs_dim)),
        "actions": ArraySpec("int32", agents),
        "rewards": ArraySpec("float32", agents),
        "dones": ArraySpec("bool", (num_envs,)),
        "action_masks": ArraySpec("bool", (*agents, env.num_actions)),
        "logprobs": ArraySpec("float32", agents),
    }


def to_body(rollout: Rollout, task_id: str, input_digest: str, version: int) -> Trajectory:
    s = jax.device_get(rollout.steps)
    return Trajectory(
        task_id, input_digest, int(s.action.shape[0]),
        observations=Array.of(s.obs), actions=Array.of(s.action), rewards=Array.of(s.reward), dones=Array.of(s.done),
        action_masks=Array.of(s.action_mask), logprobs=Array.of(s.log_prob), policy_version=version,
    )  # fmt: skip


class Replayed(NamedTuple):
    """What the environment did under a trajectory's actions, computed by this peer."""

    obs: np.ndarray
    action_mask: np.ndarray
    reward: np.ndarray
    done: np.ndarray
    returned: np.ndarray
    last_obs: np.ndarray

    def batch(self, actions: np.ndarray, behaviour_log_prob: np.ndarray) -> Batch:
        envs = self.done.shape[1]
        return Batch(self.obs, self.action_mask, actions, behaviour_log_prob, self.reward, self.done, self.last_obs, np.ones(envs, np.float32))

    def mean_return(self) -> float:
        return mean_return(self.done, self.returned, self.reward)


class ReplayError(ValueError):
    """A trajectory that is not what the environment does under its actions."""


class Verifier:
    """Replays trajectories of one environment; remembers the last few results, so the policy's
    check, the reward and the learner of every peer in the process replay a body once."""

    def __init__(self, env: MultiAgentEnv, num_envs: int, steps: int, cache: int = 64) -> None:
        compilation_cache.enable()
        self.env, self.num_envs, self.steps = env, num_envs, steps
        self.spec = trajectory_spec(env, num_envs)
        self._replay = jax.jit(self._run)
        self._cache: OrderedDict[bytes, Replayed] = OrderedDict()
        self._size, self._lock = cache, threading.Lock()

    def _run(self, keys: jax.Array, actions: jax.Array) -> tuple[jax.Array, ...]:
        state, first = jax.vmap(self.env.reset)(keys)

        def one(
            carry: tuple[EnvState, jax.Array, jax.Array], action: jax.Array
        ) -> tuple[tuple[EnvState, jax.Array, jax.Array], tuple[jax.Array, ...]]:
            state, obs, mask = carry
            state, step = self.env.step_all(state, action)
            return (state, step.obs, step.action_mask), (obs, mask, step.reward, step.done, step.returned)

        (_, last_obs, _), (obs, mask, reward, done, returned) = jax.lax.scan(one, (state, first.obs, first.action_mask), actions)
        return obs, mask, reward, done, returned, last_obs

    @staticmethod
    def _key(seed: int, actions: np.ndarray) -> bytes:
        return hashlib.sha256(seed.to_bytes(8, "little", signed=True) + np.ascontiguousarray(actions).tobytes()).digest()

    def remember(self, seed: int, rollout: Rollout) -> None:
        """Record this peer's own rollout as its replay: it is what the environment did (the
        rollout ran the same wrapper), so scoring and training on it replay nothing."""
        s = jax.device_get(rollout.steps)
        known = Replayed(s.obs, s.action_mask, s.reward, s.done, s.returned, np.asarray(rollout.last_obs))
        self._store(self._key(seed, s.action), known)

    def forget(self) -> None:
        """Drop every remembered result: the next ``verify`` of any body really replays it."""
        with self._lock:
            self._cache.clear()

    def _store(self, key: bytes, value: Replayed) -> None:
        with self._lock:
            self._cache[key] = value
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)

    def replay(self, seed: int, actions: np.ndarray) -> Replayed:
        """The environment's own account of ``actions`` [steps, envs, agents] from ``seed``."""
        key = self._key(seed, actions)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        out = Replayed(*jax.device_get(self._replay(env_keys(seed, self.num_envs), jnp.asarray(actions))))
        self._store(key, out)
        return out

    def verify(self, body: Trajectory, seed: int) -> Replayed:
        """Replay ``body`` from the task's ``seed``; raise ReplayError naming the first mismatch."""
        if body.steps != self.steps:
            raise ReplayError(f"{body.steps} steps, this game plays {self.steps}")
        wrong = body.violations(self.spec)
        if wrong is not None:
            raise ReplayError(wrong)
        actions = body.actions.numpy()
        if actions.min() < 0 or actions.max() >= self.env.num_actions:
            raise ReplayError(f"actions outside [0, {self.env.num_actions})")
        assert body.logprobs is not None and body.action_masks is not None  # the spec requires them
        logprobs = body.logprobs.numpy()
        if not (np.isfinite(logprobs).all() and logprobs.max() <= 0.0):
            raise ReplayError("log-probs must be finite and <= 0")
        replayed = self.replay(seed, actions)
        if not np.take_along_axis(replayed.action_mask, actions[..., None], -1).all():
            raise ReplayError("an action the environment forbids (masked) was taken")
        for name, mine, theirs in (
            ("observations", replayed.obs, body.observations.numpy()),
            ("action_masks", replayed.action_mask, body.action_masks.numpy()),
            ("dones", replayed.done, body.dones.numpy()),
            ("rewards", replayed.reward, body.rewards.numpy()),
        ):
            if not np.allclose(mine, theirs, rtol=RTOL, atol=ATOL):
                step = int(np.argwhere(~np.isclose(mine, theirs, rtol=RTOL, atol=ATOL))[0][0])
                raise ReplayError(f"{name} differ from the replay at step {step}")
        return replayed


@lru_cache(maxsize=32)
def _verifier(env_key: str, num_envs: int, steps: int) -> Verifier:
    return Verifier(MultiAgentEnv(EnvConfig(**json.loads(env_key))), num_envs, steps)


def verifier_for(env: EnvConfig, num_envs: int, steps: int) -> Verifier:
    """The process's verifier for trajectories of this shape: one compiled replay, one cache."""
    return _verifier(env.key(), num_envs, steps)
