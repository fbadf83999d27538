"""A team of agents learning with IPPO or MAPPO, every step compiled.

``Team`` owns the environment, the two networks and their optimizers, and exposes compiled
functions: ``collect`` (a rollout from freshly reset environments: what a swarm round plays and
what peers replay), ``update`` (GAE, then epochs of minibatch PPO steps on a batch, with padding
and off-policy weights so a peer's trajectories can join this peer's), and ``learn`` (Mava's
loop: rollout from persistent environments then update, ``lax.scan``-ned over many updates, for
the benchmark). Rollouts are ``vmap`` over environments and ``lax.scan`` over steps.

``update`` and ``learn`` split the environments, and every minibatch, over the host's CPU
devices (``marl.devices``: one core each) when they divide evenly; each share runs the same
code with ``axis`` naming the device axis, and the losses' weighted means sum over the shares.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache, partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import PartitionSpec

from genrl_swarm.paradigms.marl import cache, devices, networks, ppo
from genrl_swarm.paradigms.marl.config import EnvConfig, SystemConfig
from genrl_swarm.paradigms.marl.envs import EnvState, MultiAgentEnv, Step


class Params(NamedTuple):
    actor: Any
    critic: Any


class TrainState(NamedTuple):
    params: Params
    actor_opt: Any
    critic_opt: Any


class Transition(NamedTuple):
    """One step of every environment: what the agents saw, did, and got. Stacked by
    ``lax.scan`` into [time, envs, ...]."""

    obs: jax.Array  # float32 [envs, agents, obs_dim]
    action_mask: jax.Array  # bool [envs, agents, actions]
    action: jax.Array  # int32 [envs, agents]
    log_prob: jax.Array  # float32 [envs, agents], under the policy that acted
    reward: jax.Array  # float32 [envs, agents]
    done: jax.Array  # bool [envs]
    returned: jax.Array  # float32 [envs], the finished episode's team return where done
    length: jax.Array  # int32 [envs]


class Rollout(NamedTuple):
    steps: Transition  # [time, envs, ...]
    last_obs: jax.Array  # the observation after the last step (for the bootstrap value)


#: Batches are built from device arrays (own rollouts) or numpy (replays of peers' bodies).
Arr = jax.Array | np.ndarray


class Batch(NamedTuple):
    """What ``update`` trains on: [time, envs, ...] arrays, ``env_weight`` 0 for padding."""

    obs: Arr
    action_mask: Arr
    action: Arr
    behaviour_log_prob: Arr
    reward: Arr
    done: Arr
    last_obs: Arr
    env_weight: Arr  # float32 [envs]


class Runner(NamedTuple):
    """The benchmark loop's carry: environments persist across updates, as in Mava."""

    train: TrainState
    env: EnvState
    last: Step
    key: jax.Array


def batch_of(rollout: Rollout) -> Batch:
    t = rollout.steps
    return Batch(t.obs, t.action_mask, t.action, t.log_prob, t.reward, t.done, rollout.last_obs, jnp.ones(t.done.shape[1], jnp.float32))


def side_by_side(parts: Sequence[Batch], slots: int) -> Batch:
    """Batches joined on the environment axis and padded with weight-0 environments to
    ``slots`` batches' width: the compiled update sees one shape however many peers sent."""
    parts = [jax.tree.map(np.asarray, p) for p in parts]
    blank = parts[0]._replace(**{f: np.zeros_like(getattr(parts[0], f)) for f in Batch._fields if f != "action_mask"})
    blank = blank._replace(action_mask=np.ones_like(blank.action_mask))  # a legal action everywhere: finite log-probs
    parts = [*parts, *[blank] * (slots - len(parts))]
    env_axis = {f: 0 if f in ("last_obs", "env_weight") else 1 for f in Batch._fields}
    return Batch(**{f: np.concatenate([getattr(p, f) for p in parts], axis=env_axis[f]) for f in Batch._fields})


def episode_stats(steps: Transition) -> dict[str, jax.Array]:
    """Mean team return and length of the episodes that finished in a rollout."""
    done = steps.done.astype(jnp.float32)
    count = done.sum()
    return {
        "episodes": count,
        "episode_return": jnp.sum(steps.returned * done) / jnp.maximum(count, 1.0),
        "episode_length": jnp.sum(steps.length * done) / jnp.maximum(count, 1.0),
    }


def mean_return(done: Any, returned: Any, reward: Any) -> float:
    """Mean team return of the episodes that finished in a rollout ([time, envs] arrays), or
    the summed team reward per environment when none did (episodes longer than the rollout)."""
    done, finished = np.asarray(done), int(np.sum(done))
    if finished:
        return float(np.sum(np.asarray(returned) * done) / finished)
    return float(np.asarray(reward).mean(axis=-1).sum(axis=0).mean())


class Team:
    """One team's learning machinery for one (environment, system); build with ``team_for`` so
    peers of one process share compiled functions."""

    def __init__(self, env: EnvConfig, system: SystemConfig) -> None:
        cache.enable()  # before the first compile: a second run loads the programs from disk
        self.env, self.system = MultiAgentEnv(env), system
        self.actor = networks.actor(system.layers, self.env.num_actions)
        self.critic = networks.critic(system.layers)
        self.actor_tx = optax.chain(optax.clip_by_global_norm(system.max_grad_norm), optax.adam(system.actor_lr, eps=1e-5))
        self.critic_tx = optax.chain(optax.clip_by_global_norm(system.max_grad_norm), optax.adam(system.critic_lr, eps=1e-5))
        self.init = jax.jit(self._init)
        self.collect = jax.jit(self._collect, static_argnames=("steps", "greedy"))
        #: CPU devices ``update`` and ``learn`` split the environments over (1: unsplit).
        self.devices = devices.split(system.devices, system.num_envs, system.rollout_length, system.num_minibatches)
        self._update_jit = jax.jit(self._update)
        self.learn = jax.jit(self._learn, static_argnames=("num_updates",))
        self.start = jax.jit(self._start)
        #: Shapes and dtypes of the parameters (what a peer's parameters must match).
        self.template: Params = jax.eval_shape(self._init, jax.random.PRNGKey(0)).params

    # ------------------------------------------------------------------ parameters
    def critic_input(self, obs: jax.Array) -> jax.Array:
        return networks.global_state(obs) if self.system.centralised_critic else obs

    def _init(self, key: jax.Array) -> TrainState:
        actor_key, critic_key = jax.random.split(key)
        obs = jnp.zeros((1, self.env.num_agents, self.env.obs_dim), jnp.float32)
        params = Params(self.actor.init(actor_key, obs), self.critic.init(critic_key, self.critic_input(obs)))
        return TrainState(params, self.actor_tx.init(params.actor), self.critic_tx.init(params.critic))

    def log_probs(self, actor_params: Any, obs: jax.Array, mask: jax.Array) -> jax.Array:
        return networks.masked_log_probs(jnp.asarray(self.actor.apply(actor_params, obs)), mask)

    def values(self, critic_params: Any, obs: jax.Array) -> jax.Array:
        return jnp.asarray(self.critic.apply(critic_params, self.critic_input(obs)))[..., 0]

    # ------------------------------------------------------------------ acting
    def _run(self, actor_params: Any, env: EnvState, last: Step, key: jax.Array, steps: int, greedy: bool) -> tuple[EnvState, Step, Transition]:
        """``steps`` steps of every environment from (env, last), sampling (or argmax) actions."""

        def one(carry: tuple[EnvState, Step], step_key: jax.Array) -> tuple[tuple[EnvState, Step], Transition]:
            env, last = carry
            log_probs = self.log_probs(actor_params, last.obs, last.action_mask)
            action = jnp.argmax(log_probs, -1) if greedy else jax.random.categorical(step_key, log_probs)
            action = action.astype(jnp.int32)
            log_prob = jnp.take_along_axis(log_probs, action[..., None], -1)[..., 0]
            env, step = self.env.step_all(env, action)
            return (env, step), Transition(last.obs, last.action_mask, action, log_prob, step.reward, step.done, step.returned, step.length)

        (env, last), transitions = jax.lax.scan(one, (env, last), jax.random.split(key, steps))
        return env, last, transitions

    def _collect(self, actor_params: Any, env_keys: jax.Array, key: jax.Array, steps: int, greedy: bool = False) -> Rollout:
        """A rollout of ``steps`` from environments reset with ``env_keys`` [envs, 2]: a pure
        function of (params, env_keys, key), and its environment side of (env_keys, actions)."""
        env, first = jax.vmap(self.env.reset)(env_keys)
        _, last, transitions = self._run(actor_params, env, first, key, steps, greedy)
        return Rollout(transitions, last.obs)

    # ------------------------------------------------------------------ learning
    def update(self, state: TrainState, batch: Batch, key: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
        """The compiled ``_update``, its results on the default device as any other program's:
        left replicated over the mesh, the parameters would make every later program they are
        passed to (collect, evaluate) compile again for, and run on, every device."""
        out = self._update_jit(state, batch, key)
        return out if self.devices == 1 else devices.gathered(out)

    def _update(self, state: TrainState, batch: Batch, key: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
        """``_update_share`` on every device's share of the environments (or unsplit, when the
        batch's environments or its minibatches do not divide over the devices)."""
        steps, envs = np.shape(batch.done)
        if self.devices == 1 or not devices.divides(self.devices, envs, steps, self.system.num_minibatches):
            return self._update_share(state, batch, key, None)
        across = PartitionSpec(devices.AXIS)
        specs = Batch(*[across if f in ("last_obs", "env_weight") else PartitionSpec(None, devices.AXIS) for f in Batch._fields])  # type: ignore[arg-type]  # a Batch of specs
        split = jax.shard_map(
            partial(self._update_share, axis=devices.AXIS),
            mesh=devices.mesh(self.devices),
            in_specs=(PartitionSpec(), specs, PartitionSpec()),
            out_specs=(PartitionSpec(), PartitionSpec()),
        )
        return split(state, batch, key)

    def _update_share(self, state: TrainState, batch: Batch, key: jax.Array, axis: str | None) -> tuple[TrainState, dict[str, jax.Array]]:
        """GAE with this team's critic, then ``epochs`` passes of ``num_minibatches`` PPO steps.

        The ratio is taken against this team's policy at the start of the update (proximal);
        data collected by another policy (``behaviour_log_prob``) is weighted by
        min(pi_prox / pi_behaviour, is_cap), which is 1 for this team's own fresh rollout.
        Under a device ``axis`` each device shuffles its own rows and gives every minibatch its
        share of them.
        """
        cfg, params = self.system, state.params
        if axis is not None:
            key = jax.random.fold_in(key, jax.lax.axis_index(axis))
        obs, mask, action, behaviour, reward, done, last_obs, env_weight = (jnp.asarray(x) for x in batch)
        values, last_value = self.values(params.critic, obs), self.values(params.critic, last_obs)
        dones = jnp.broadcast_to(done[..., None], reward.shape)
        advantages, targets = ppo.gae(reward, values, dones, last_value, cfg.gamma, cfg.gae_lambda)
        prox = jnp.take_along_axis(self.log_probs(params.actor, obs, mask), action[..., None], -1)[..., 0]
        valid = jnp.broadcast_to(env_weight[None, :, None], reward.shape)
        weight = valid * jnp.minimum(jnp.exp(prox - behaviour), cfg.is_cap)
        samples = (obs, mask, action, prox, advantages, values, targets, weight, valid)
        flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), samples)  # [time * envs, agents, ...]
        size = flat[0].shape[0]

        def minibatch_step(state: TrainState, mb: tuple[jax.Array, ...]) -> tuple[TrainState, dict[str, jax.Array]]:
            obs, mask, action, prox, adv, old_value, target, weight, valid = mb
            adv = ppo.normalise(adv, valid, axis)

            def actor_loss(p: Any) -> tuple[jax.Array, tuple[ppo.PolicyLoss, jax.Array]]:
                log_probs = self.log_probs(p, obs, mask)
                log_prob = jnp.take_along_axis(log_probs, action[..., None], -1)[..., 0]
                pl = ppo.policy_loss(log_prob, prox, adv, cfg.clip_eps, weight, axis)
                ent = ppo.weighted_mean(networks.entropy(log_probs, mask), valid, axis)
                return pl.loss - cfg.ent_coef * ent, (pl, ent)

            def critic_loss(p: Any) -> jax.Array:
                return cfg.vf_coef * ppo.value_loss(self.values(p, obs), old_value, target, cfg.clip_eps, valid, axis)

            (a_loss, (pl, ent)), a_grad = jax.value_and_grad(actor_loss, has_aux=True)(state.params.actor)
            c_loss, c_grad = jax.value_and_grad(critic_loss)(state.params.critic)
            a_upd, actor_opt = self.actor_tx.update(a_grad, state.actor_opt, state.params.actor)
            c_upd, critic_opt = self.critic_tx.update(c_grad, state.critic_opt, state.params.critic)
            params = Params(optax.apply_updates(state.params.actor, a_upd), optax.apply_updates(state.params.critic, c_upd))
            metrics = {"actor_loss": pl.loss, "value_loss": c_loss, "entropy": ent, "clip_fraction": pl.clip_fraction, "approx_kl": pl.approx_kl}
            return TrainState(params, actor_opt, critic_opt), metrics

        def epoch(state: TrainState, epoch_key: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
            order = jax.random.permutation(epoch_key, size)
            minibatches = jax.tree.map(lambda x: x[order].reshape(cfg.num_minibatches, -1, *x.shape[1:]), flat)
            return jax.lax.scan(minibatch_step, state, minibatches)

        state, metrics = jax.lax.scan(epoch, state, jax.random.split(key, cfg.epochs))
        metrics = jax.tree.map(jnp.mean, metrics)
        metrics["is_weight"] = ppo.weighted_mean(weight, valid, axis)
        return state, metrics

    # ------------------------------------------------------------------ Mava's loop (benchmark)
    def _start(self, key: jax.Array) -> Runner:
        init_key, env_key, key = jax.random.split(key, 3)
        env, first = jax.vmap(self.env.reset)(jax.random.split(env_key, self.system.num_envs))
        return Runner(self._init(init_key), env, first, key)

    def _learn(self, runner: Runner, num_updates: int) -> tuple[Runner, dict[str, jax.Array]]:
        """``num_updates`` of (rollout of ``rollout_length`` steps, update), all in one scan."""

        def one(runner: Runner, _: None) -> tuple[Runner, dict[str, jax.Array]]:
            key, act_key, update_key = jax.random.split(runner.key, 3)
            env, last, steps = self._steps(runner.train.params.actor, runner.env, runner.last, act_key)
            train, metrics = self._update(runner.train, batch_of(Rollout(steps, last.obs)), update_key)
            return Runner(train, env, last, key), metrics | episode_stats(steps)

        return jax.lax.scan(one, runner, None, length=num_updates)

    def _steps(self, actor_params: Any, env: EnvState, last: Step, key: jax.Array) -> tuple[EnvState, Step, Transition]:
        """``_run`` for ``rollout_length`` steps, each device stepping its share of the
        environments with its own key. Not for ``collect``: what a round plays (and the held-out
        evaluation every peer runs with one shared key) must be the same on every peer whatever
        its device count."""
        if self.devices == 1:
            return self._run(actor_params, env, last, key, self.system.rollout_length, False)

        def share(actor_params: Any, env: EnvState, last: Step, key: jax.Array) -> tuple[EnvState, Step, Transition]:
            key = jax.random.fold_in(key, jax.lax.axis_index(devices.AXIS))
            return self._run(actor_params, env, last, key, self.system.rollout_length, False)

        whole, across = PartitionSpec(), PartitionSpec(devices.AXIS)
        split = jax.shard_map(
            share,
            mesh=devices.mesh(self.devices),
            in_specs=(whole, across, across, whole),
            out_specs=(across, across, PartitionSpec(None, devices.AXIS)),
            check_vma=False,  # Jumanji's inner scans start from constants; nothing here is differentiated
        )
        return split(actor_params, env, last, key)

    def evaluate(self, actor_params: Any, key: jax.Array, episodes: int, greedy: bool = False) -> jax.Array:
        """Team return of the first episode of ``episodes`` fresh environments. Sampled by
        default, as Mava evaluates (``evaluation_greedy: false``); argmax with ``greedy``."""
        env_key, act_key = jax.random.split(key)
        rollout = self.collect(actor_params, jax.random.split(env_key, episodes), act_key, steps=self.env.config.time_limit, greedy=greedy)
        return first_episode_returns(rollout.steps)


@partial(jax.jit)
def first_episode_returns(steps: Transition) -> jax.Array:
    """[envs] team return of each environment's first finished episode (0 if none finished)."""
    first = jnp.argmax(steps.done, axis=0)
    found = jnp.any(steps.done, axis=0)
    return jnp.where(found, jnp.take_along_axis(steps.returned, first[None], 0)[0], 0.0)


@lru_cache(maxsize=16)
def _cached(env_key: str, system: SystemConfig) -> Team:
    return Team(EnvConfig(**json.loads(env_key)), system)


def team_for(env: EnvConfig, system: SystemConfig) -> Team:
    """The process's ``Team`` for (env, system): its compiled functions are shared by every
    peer (and test) that asks for the same configuration."""
    return _cached(env.key(), system)
