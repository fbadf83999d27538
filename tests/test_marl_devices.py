"""MARL across CPU devices: an update split over two devices is the unsplit update, and a peer's
rollout (what others replay) does not depend on the device count.

JAX fixes its device count when its backend starts, so each check runs in a fresh process that
asks for two CPU devices (this test process may already hold a one-device backend)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest

jax = pytest.importorskip("jax")  # the child processes need it
jumanji = pytest.importorskip("jumanji")

pytestmark = pytest.mark.slow  # JAX compiles in a subprocess

PRELUDE = """
import jax, jax.numpy as jnp, numpy as np
from genrl_swarm.paradigms.marl.config import EnvConfig, Scenario, SystemConfig
from genrl_swarm.paradigms.marl.team import Team, batch_of
assert len(jax.devices("cpu")) == 2, jax.devices()
ENV = EnvConfig(scenario=Scenario("tiny", "lbf", {"grid_size": 5, "fov": 2, "num_agents": 2, "num_food": 1,
    "max_agent_level": 2, "force_coop": False}), time_limit=25)
def team(**system):
    return Team(ENV, SystemConfig(**{"name": "mappo", "num_envs": 8, "rollout_length": 16, **system}))
def largest(tree):
    return max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(tree))
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    """Runs a body after PRELUDE in a fresh two-device process; its stdout. The module's processes
    share a JAX compilation cache (``paradigms.marl.cache``): the second loads the programs both
    build (init, collect on one and on two devices) instead of compiling them again, and a loaded
    program is the executable the first compiled, so results are bit for bit the same."""
    cache = tmp_path_factory.mktemp("marl_devices_jax")

    def python(body: str) -> str:
        env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "GENRL_SWARM_JAX_CACHE": str(cache)}
        code = textwrap.dedent(PRELUDE) + textwrap.dedent(body)
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    return python


def test_an_update_split_over_two_devices_is_the_unsplit_update(run: Callable[[str], str]) -> None:
    """One epoch of one minibatch takes every row on both paths, so the minibatch draw cannot
    differ: the parameters must agree to float rounding. Padding environments (weight 0) and
    off-policy weights are in the batch, so each weighted mean must sum its numerator and its
    weight over both devices (a mean per device, averaged, misses by more than the update moves)."""
    out = run("""
        results = {}
        for devices in (1, 2):
            t = team(epochs=1, num_minibatches=1, devices=devices)
            state = t.init(jax.random.PRNGKey(0))
            rollout = t.collect(state.params.actor, jax.random.split(jax.random.PRNGKey(1), 8), jax.random.PRNGKey(2), steps=16)
            batch = batch_of(rollout)
            batch = batch._replace(env_weight=jnp.array([1.0, 1, 0, 1, 1, 1, 0, 0]),
                                   behaviour_log_prob=batch.behaviour_log_prob - jnp.linspace(0, 0.6, 8)[None, :, None])
            new, metrics = t.update(state, batch, jax.random.PRNGKey(3))
            results[devices] = (t.devices, new.params, state.params, {k: float(v) for k, v in metrics.items()})
        assert (results[1][0], results[2][0]) == (1, 2), (results[1][0], results[2][0])
        diff = largest(jax.tree.map(jnp.subtract, results[1][1], results[2][1]))
        moved = largest(jax.tree.map(jnp.subtract, results[1][1], results[1][2]))
        print("diff", diff, "moved", moved)
        assert moved > 1e-5 and diff < 1e-3 * moved, (diff, moved)
        for k, v in results[1][3].items():
            assert abs(v - results[2][3][k]) <= 1e-5 * max(1.0, abs(v)), (k, v, results[2][3][k])
    """)
    assert "diff" in out


def test_the_rollout_peers_replay_and_the_learn_loop_under_two_devices(run: Callable[[str], str]) -> None:
    """``collect`` (what a peer plays and every other peer replays to check it) is the same
    whatever the device count; ``learn`` (Mava's loop) runs split and learns finite numbers;
    environments that do not divide over the devices run unsplit."""
    run("""
        one, two = team(devices=1), team()
        assert (one.devices, two.devices, team(num_envs=3, rollout_length=16, num_minibatches=1).devices) == (1, 2, 1)
        params = one.init(jax.random.PRNGKey(0)).params.actor
        a = one.collect(params, jax.random.split(jax.random.PRNGKey(1), 8), jax.random.PRNGKey(2), steps=16)
        b = two.collect(params, jax.random.split(jax.random.PRNGKey(1), 8), jax.random.PRNGKey(2), steps=16)
        assert all(bool(jnp.array_equal(x, y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
        runner, metrics = two.learn(two.start(jax.random.PRNGKey(0)), num_updates=3)
        assert all(bool(jnp.all(jnp.isfinite(v))) for v in metrics.values()), metrics
        assert float(metrics["episodes"].sum()) > 0
        assert largest(jax.tree.map(jnp.subtract, runner.train.params, two.init(jax.random.PRNGKey(0)).params)) > 0
    """)
