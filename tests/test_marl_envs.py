"""MARL: the wrapper around Jumanji's LevelBasedForaging-v0 and RobotWarehouse-v0."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("jumanji")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from genrl_swarm.paradigms.marl.config import EnvConfig, Scenario, SystemConfig  # noqa: E402
from genrl_swarm.paradigms.marl.envs import MultiAgentEnv  # noqa: E402

pytestmark = pytest.mark.slow  # JAX compiles each environment

TINY_LBF = Scenario("5x5-2p-1f", "lbf", {"grid_size": 5, "fov": 5, "num_agents": 2, "num_food": 1, "max_agent_level": 2, "force_coop": False})
TINY_2AG = Scenario(
    "tiny-2ag", "rware", {"shelf_rows": 1, "shelf_columns": 3, "column_height": 8, "num_agents": 2, "sensor_range": 1, "request_queue_size": 2}
)


class Played(NamedTuple):
    first: Any  # the Step of the reset [envs, ...]
    steps: Any  # the Steps of the actions [envs, steps, ...], one environment at a time (env.step)
    next_first: Any  # the Step a reset from the key the first state carries gives
    batched: Any  # the same Steps from env.step_all on the whole batch, [steps, envs, ...]


def player(env: MultiAgentEnv) -> Callable[[Any, Any], Played]:
    """One compiled function per environment: reset each of a batch of keys, play its actions
    [envs, steps, agents]. Every test of that environment calls it with the same shapes."""

    def run(key: Any, actions: Any) -> tuple[Any, Any, Any]:
        state, first = env.reset(key)
        _, steps = jax.lax.scan(env.step, state, actions)
        return first, steps, env.reset(state.reset_key)[1]

    def play(keys: Any, actions: Any) -> Played:
        states, _ = jax.vmap(env.reset)(keys)
        _, batched = jax.lax.scan(env.step_all, states, actions.swapaxes(0, 1))
        return Played(*jax.vmap(run)(keys, actions), batched)

    return jax.jit(play)


ENVS, STEPS = 32, 12


@pytest.fixture(scope="module")
def lbf() -> Callable[[Any, Any], Played]:
    return player(MultiAgentEnv(EnvConfig(scenario=TINY_LBF, time_limit=6)))


def keys(seed: int) -> Any:
    return jax.random.split(jax.random.PRNGKey(seed), ENVS)


def random_actions(seed: int, num_actions: int) -> Any:
    return jax.random.randint(jax.random.PRNGKey(seed), (ENVS, STEPS, 2), 0, num_actions)


def test_lbf_observation_has_the_agent_id_one_hot_and_the_action_mask(lbf: Callable[[Any, Any], Played]) -> None:
    first = lbf(keys(0), random_actions(0, 6)).first
    assert first.obs.dtype == jnp.float32 and first.obs.shape == (ENVS, 2, (2 + 1) * 3 + 2)  # (agents + food) x 3, then the ids
    np.testing.assert_array_equal(first.obs[0, :, -2:], np.eye(2))
    assert first.action_mask.dtype == jnp.bool_ and first.action_mask.shape == (ENVS, 2, 6)


def test_episodes_end_at_the_time_limit_and_restart_from_the_carried_key(lbf: Callable[[Any, Any], Played]) -> None:
    out = lbf(keys(1), jnp.zeros((ENVS, STEPS, 2), jnp.int32))  # no-ops: no food is ever eaten
    assert out.steps.done[0].tolist() == ([False] * 5 + [True]) * 2
    assert int(out.steps.length[0, 5]) == 6 and float(out.steps.returned[0, 5]) == 0.0
    np.testing.assert_array_equal(out.steps.obs[:, 5], out.next_first.obs)  # the next episode's first view
    assert not np.array_equal(out.steps.obs[:, 5], out.first.obs)


def test_a_rollout_is_a_function_of_the_key_and_the_actions(lbf: Callable[[Any, Any], Played]) -> None:
    actions = random_actions(2, 6)
    a, b = lbf(keys(3), actions), lbf(keys(3), actions)
    jax.tree.map(np.testing.assert_array_equal, a, b)
    assert not np.array_equal(a.first.obs, lbf(keys(4), actions).first.obs)


def test_team_reward_gives_every_agent_the_sum_and_individual_keeps_each() -> None:
    raw = jnp.array([0.25, 0.5])
    team = MultiAgentEnv(EnvConfig(scenario=TINY_LBF))._rewards(raw)
    own = MultiAgentEnv(EnvConfig(scenario=TINY_LBF, team_reward=False))._rewards(raw)
    np.testing.assert_allclose(team[0], [0.75, 0.75])
    np.testing.assert_allclose(own[0], [0.25, 0.5])
    assert float(team[1]) == float(own[1]) == 0.75  # the team's return counts every agent's food once


def test_the_batched_step_resets_only_finished_episodes_like_the_single_one(lbf: Callable[[Any, Any], Played]) -> None:
    out = lbf(keys(9), random_actions(8, 6))
    assert bool(out.steps.done.any()) and not bool(out.steps.done.all())
    jax.tree.map(lambda one, batch: np.testing.assert_array_equal(one, batch.swapaxes(0, 1)), out.steps, out.batched)


def test_lbf_episode_return_sums_the_team_reward_of_the_episode(lbf: Callable[[Any, Any], Played]) -> None:
    steps = lbf(keys(5), random_actions(6, 6)).steps
    team = np.asarray(steps.reward[..., 0])  # every agent holds the team's reward
    assert team.sum() > 0, "random play on a 5x5 grid eats some food"
    for e in range(ENVS):
        ends = np.flatnonzero(steps.done[e])
        if ends.size:
            assert float(steps.returned[e, ends[0]]) == pytest.approx(float(team[e, : ends[0] + 1].sum()), abs=1e-6)


def test_rware_tiny_2ag_shapes_and_team_reward() -> None:
    env = MultiAgentEnv(EnvConfig(env_name="RobotWarehouse-v0", scenario=TINY_2AG, time_limit=500))
    assert (env.num_agents, env.num_actions, env.view_dim) == (2, 5, 66)
    out = player(env)(keys(0), random_actions(7, 5))
    assert out.first.obs.shape == (ENVS, 2, 68) and out.first.action_mask.shape == (ENVS, 2, 5)
    assert out.steps.reward.shape == (ENVS, STEPS, 2) and bool((out.steps.reward[..., 0] == out.steps.reward[..., 1]).all())


def test_a_scenario_of_the_other_environment_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="scenario must be a rware scenario"):
        EnvConfig(env_name="RobotWarehouse-v0", scenario=TINY_LBF)
    with pytest.raises(ValueError, match="num_minibatches must be"):
        SystemConfig(num_envs=3, rollout_length=3, num_minibatches=2)
