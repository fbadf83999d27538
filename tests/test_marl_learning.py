"""MARL: the IPPO learner learns a tiny foraging task, and would not with the wrong sign.

It runs the swarm game's own compiled pieces (the ``marl/tiny`` recipe's team: rollout from
the round's seed, then the padded PPO update), so the swarm tests reuse the compilation."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("jumanji")

import numpy as np  # noqa: E402

from genrl_swarm.config import load_recipe, resolve  # noqa: E402
from genrl_swarm.paradigms.marl.config import EnvConfig, SystemConfig  # noqa: E402
from genrl_swarm.paradigms.marl.replay import env_keys  # noqa: E402
from genrl_swarm.paradigms.marl.team import Team, batch_of, mean_return, side_by_side, team_for  # noqa: E402

pytestmark = pytest.mark.slow  # JAX training


def tiny(**system: object) -> Team:
    spec = resolve(load_recipe("marl/tiny"))
    return team_for(EnvConfig.of(spec["policy"]["env"]), SystemConfig.of({**spec["policy"]["system"], **system}))


def test_ippo_learns_to_forage_in_fifty_updates() -> None:
    team, key = tiny(), jax.random.PRNGKey(1)
    state, returns = team.init(jax.random.PRNGKey(0)), []
    for i in range(50):
        key, act, update = jax.random.split(key, 3)
        rollout = team.collect(state.params.actor, env_keys(i, 8), act, steps=25)
        state, metrics = team.update(state, side_by_side([batch_of(rollout)], 2), update)
        steps = jax.device_get(rollout.steps)
        returns.append(mean_return(steps.done, steps.returned, steps.reward))
    first, last = float(np.mean(returns[:5])), float(np.mean(returns[-10:]))
    # Measured: 0.55 -> 0.83. With the policy-gradient sign flipped: 0.46 -> 0.0.
    assert last > 0.7 and last > first + 0.15, f"mean team return {first:.2f} -> {last:.2f}"
    assert 0.0 < float(metrics["entropy"]) < np.log(6)


def test_mappo_critic_sees_the_global_state_and_ippo_only_its_own_view() -> None:
    obs_dim = 3 * 3 + 2  # (2 agents + 1 food) x (y, x, level), then the agent id
    assert tiny().template.critic["params"]["Dense_0"]["kernel"].shape == (obs_dim, 32)
    assert tiny(name="mappo").template.critic["params"]["Dense_0"]["kernel"].shape == (2 * obs_dim + 2, 32)
