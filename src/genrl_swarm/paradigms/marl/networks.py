"""Actor and critic: two separate MLPs (128x128 by default), shared by all agents of a team.

Sharing one network across agents is Mava's default; the one-hot id in each observation lets
it still act differently per agent. The actor masks illegal actions before the softmax. The
critic sees the agent's own observation (IPPO) or the global state (MAPPO): every agent's
observation, concatenated, plus the agent's own id.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

#: Logit of an action the mask forbids: exp() of it is 0 in float32, and it stays finite.
MASKED = -1e9


class MLP(nn.Module):
    """ReLU layers with orthogonal init (sqrt 2), then a linear head of scale ``head_scale``."""

    layers: Sequence[int]
    outputs: int
    head_scale: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for size in self.layers:
            x = nn.relu(nn.Dense(size, kernel_init=nn.initializers.orthogonal(np.sqrt(2.0)))(x))
        return nn.Dense(self.outputs, kernel_init=nn.initializers.orthogonal(self.head_scale))(x)


def actor(layers: Sequence[int], num_actions: int) -> MLP:
    """Small head scale (0.01): the first policy is near uniform over legal actions."""
    return MLP(tuple(layers), num_actions, 0.01)


def critic(layers: Sequence[int]) -> MLP:
    return MLP(tuple(layers), 1, 1.0)


def masked_log_probs(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """Log-probabilities of a categorical restricted to ``mask`` (forbidden actions: ~-1e9)."""
    return jax.nn.log_softmax(jnp.where(mask, logits, MASKED), axis=-1)


def entropy(log_probs: jax.Array, mask: jax.Array) -> jax.Array:
    """Entropy over the legal actions (forbidden ones contribute exactly 0)."""
    return -jnp.sum(jnp.where(mask, jnp.exp(log_probs) * log_probs, 0.0), axis=-1)


def global_state(obs: jax.Array) -> jax.Array:
    """[..., agents, obs_dim] -> [..., agents, agents * obs_dim + agents]: each agent's critic
    input under MAPPO is the whole team's observation and its own id."""
    agents = obs.shape[-2]
    team = obs.reshape(*obs.shape[:-2], 1, agents * obs.shape[-1])
    team = jnp.broadcast_to(team, (*obs.shape[:-2], agents, team.shape[-1]))
    ids = jnp.broadcast_to(jnp.eye(agents, dtype=obs.dtype), (*obs.shape[:-2], agents, agents))
    return jnp.concatenate([team, ids], axis=-1)
