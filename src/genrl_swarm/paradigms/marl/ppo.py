"""The pure pieces of PPO: GAE, the clipped policy loss, the clipped value loss.

Pure functions of arrays, so the tests compare them with values computed by hand. Shapes:
time first, then any batch dimensions (environments, agents).

``axis`` names the device axis of a ``shard_map`` when a minibatch is split over devices: each
weighted mean then sums its numerator and weight over every device's share (``psum``), so the
loss, and by autodiff its gradient, are those of the whole minibatch on one device.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


def gae(rewards: jax.Array, values: jax.Array, dones: jax.Array, last_value: jax.Array, gamma: float, lam: float) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimates and value targets, scanning backwards in time.

    ``dones[t]`` says the episode ended with step t: no bootstrap from the next value, and the
    trace restarts. Returns (advantages, targets = advantages + values), shaped like ``rewards``.
    """

    def back(carry: tuple[jax.Array, jax.Array], x: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
        next_adv, next_value = carry
        reward, value, done = x
        live = 1.0 - done.astype(jnp.float32)
        delta = reward + gamma * next_value * live - value
        adv = delta + gamma * lam * live * next_adv
        return (adv, value), adv

    start = (jnp.zeros_like(last_value), last_value)
    _, advantages = jax.lax.scan(back, start, (rewards, values, dones), reverse=True)
    return advantages, advantages + values


class PolicyLoss(NamedTuple):
    loss: jax.Array
    clip_fraction: jax.Array
    approx_kl: jax.Array


def weighted_mean(x: jax.Array, weight: jax.Array, axis: str | None = None) -> jax.Array:
    total, mass = jnp.sum(x * weight), jnp.sum(weight)
    if axis is not None:
        total, mass = jax.lax.psum((total, mass), axis)
    return total / jnp.maximum(mass, 1e-8)


def policy_loss(
    log_prob: jax.Array, prox_log_prob: jax.Array, advantage: jax.Array, clip_eps: float, weight: jax.Array, axis: str | None = None
) -> PolicyLoss:
    """PPO's clipped surrogate, to minimise: -mean(w * min(r A, clip(r, 1-eps, 1+eps) A)).

    ``r = exp(log_prob - prox_log_prob)`` is measured against the policy at the start of this
    update (the proximal policy); ``weight`` carries the truncated importance weight of data
    another policy collected (1 for this peer's own fresh data) and zeroes padding.
    """
    ratio = jnp.exp(log_prob - prox_log_prob)
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    surrogate = jnp.minimum(ratio * advantage, clipped * advantage)
    loss = -weighted_mean(surrogate, weight, axis)
    clip_fraction = weighted_mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32), weight, axis)
    approx_kl = weighted_mean((ratio - 1.0) - (log_prob - prox_log_prob), weight, axis)
    return PolicyLoss(loss, clip_fraction, approx_kl)


def value_loss(value: jax.Array, old_value: jax.Array, target: jax.Array, clip_eps: float, weight: jax.Array, axis: str | None = None) -> jax.Array:
    """0.5 * mean(max((v - target)^2, (v_clipped - target)^2)) with v_clipped kept within
    ``clip_eps`` of the value the targets were computed with: the critic cannot jump."""
    clipped = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
    return 0.5 * weighted_mean(jnp.maximum(jnp.square(value - target), jnp.square(clipped - target)), weight, axis)


def normalise(advantage: jax.Array, weight: jax.Array, axis: str | None = None) -> jax.Array:
    """Advantages with zero mean and unit std over the (weighted) minibatch."""
    mean = weighted_mean(advantage, weight, axis)
    std = jnp.sqrt(weighted_mean(jnp.square(advantage - mean), weight, axis))
    return (advantage - mean) / (std + 1e-8)
