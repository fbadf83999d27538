"""MARL: GAE, the clipped PPO losses, masking and the critic's input, against values worked out by hand."""

from __future__ import annotations

import math

import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flax")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from genrl_swarm.paradigms.marl import networks, ppo  # noqa: E402


def test_gae_matches_the_hand_computed_recursion_and_stops_at_a_done() -> None:
    # gamma 0.9, lambda 0.8; the episode ends with step 1, so step 0 does not see step 2's reward.
    #   t=2: delta = 2 + 0.9*0.2 - 0.3 = 1.88                      adv = 1.88
    #   t=1: delta = 0 - 0.4 (done: no bootstrap)                  adv = -0.4
    #   t=0: delta = 1 + 0.9*0.4 - 0.5 = 0.86; adv = 0.86 + 0.72*(-0.4) = 0.572
    rewards, values = jnp.array([1.0, 0.0, 2.0]), jnp.array([0.5, 0.4, 0.3])
    dones = jnp.array([False, True, False])
    adv, targets = ppo.gae(rewards, values, dones, jnp.array(0.2), gamma=0.9, lam=0.8)
    np.testing.assert_allclose(adv, [0.572, -0.4, 1.88], rtol=1e-6)
    np.testing.assert_allclose(targets, [1.072, 0.0, 2.18], rtol=1e-6)


def test_gae_with_lambda_one_and_no_done_is_the_discounted_return_minus_value() -> None:
    rewards = jnp.array([[1.0, 0.0], [1.0, 1.0]])  # [time, agents]
    values = jnp.zeros((2, 2))
    adv, _ = ppo.gae(rewards, values, jnp.zeros((2, 2), bool), jnp.array([10.0, 0.0]), gamma=0.5, lam=1.0)
    np.testing.assert_allclose(adv, [[1 + 0.5 + 0.25 * 10, 0.5], [1 + 0.5 * 10, 1.0]], rtol=1e-6)


RATIOS = jnp.log(jnp.array([1.5, 0.5, 1.5, 0.5]))
ADV = jnp.array([2.0, 2.0, -1.0, -1.0])


def test_clipped_policy_loss_takes_the_pessimistic_term() -> None:
    # min(r A, clip(r, 0.8, 1.2) A): 2.4 (clipped), 1.0, -1.5, -0.8 (clipped); loss = -mean = -0.275
    out = ppo.policy_loss(RATIOS, jnp.zeros(4), ADV, 0.2, jnp.ones(4))
    assert float(out.loss) == pytest.approx(-0.275, rel=1e-6)
    assert float(out.clip_fraction) == 1.0
    weighted = ppo.policy_loss(RATIOS, jnp.zeros(4), ADV, 0.2, jnp.array([1.0, 0.0, 0.0, 0.0]))
    assert float(weighted.loss) == pytest.approx(-2.4, rel=1e-6)  # weight 0 = padding: ignored


def test_policy_gradient_raises_good_actions_and_is_zero_where_clipped() -> None:
    grad = jax.grad(lambda lp: ppo.policy_loss(lp, jnp.zeros(4), ADV, 0.2, jnp.ones(4)).loss)(RATIOS)
    # d(-mean)/d log r = -r A / 4 where the unclipped term is the minimum, else 0
    np.testing.assert_allclose(grad, [0.0, -0.25, 0.375, 0.0], rtol=1e-6)


def test_value_loss_is_clipped_around_the_old_value() -> None:
    # v=1.0 (old 0.5 -> clipped 0.7), target 2: max(1, 1.69); v=0 (clipped 0.3), target 0.4: max(0.16, 0.01)
    loss = ppo.value_loss(jnp.array([1.0, 0.0]), jnp.array([0.5, 0.5]), jnp.array([2.0, 0.4]), 0.2, jnp.ones(2))
    assert float(loss) == pytest.approx(0.5 * (1.69 + 0.16) / 2, rel=1e-6)


def test_normalised_advantages_ignore_padding() -> None:
    out = ppo.normalise(jnp.array([1.0, 3.0, 100.0]), jnp.array([1.0, 1.0, 0.0]))
    np.testing.assert_allclose(out[:2], [-1.0, 1.0], rtol=1e-5)


def test_masked_actions_get_no_probability_and_no_entropy() -> None:
    mask = jnp.array([True, True, False])
    log_probs = networks.masked_log_probs(jnp.array([0.0, 0.0, 50.0]), mask)
    np.testing.assert_allclose(jnp.exp(log_probs), [0.5, 0.5, 0.0], atol=1e-7)
    assert float(networks.entropy(log_probs, mask)) == pytest.approx(math.log(2), rel=1e-6)
    assert bool(jnp.isfinite(log_probs).all())


def test_global_state_is_every_agents_observation_and_the_own_id() -> None:
    obs = jnp.arange(2 * 3 * 4, dtype=jnp.float32).reshape(2, 3, 4)  # [envs, agents, features]
    state = networks.global_state(obs)
    assert state.shape == (2, 3, 3 * 4 + 3)
    np.testing.assert_array_equal(state[1, 2, :12], obs[1].reshape(-1))
    np.testing.assert_array_equal(state[1, 2, 12:], [0.0, 0.0, 1.0])
