"""MARL in the swarm: trajectories verified by replaying the environment, forgeries dropped and
counted, parameters checked before they are averaged. Peers run the real loop in memory."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("jumanji")

import msgspec  # noqa: E402
import numpy as np  # noqa: E402

from genrl_swarm.config import instantiate, load_recipe, resolve  # noqa: E402
from genrl_swarm.core import Array, Body, GameState, RoundResult, StageInput  # noqa: E402
from genrl_swarm.core.admission import admit
from genrl_swarm.games.marl import MarlData  # noqa: E402
from genrl_swarm.paradigms.marl import sharing  # noqa: E402
from genrl_swarm.paradigms.marl.bodies import Trajectory
from genrl_swarm.paradigms.marl.policy import MarlPolicy  # noqa: E402
from genrl_swarm.paradigms.marl.replay import verifier_for  # noqa: E402
from genrl_swarm.run.launcher import build_managers, run_managers  # noqa: E402

pytestmark = pytest.mark.slow  # JAX training

#: The tiny recipe (5x5 LBF, 8 environments x 25 steps), quiet, no final absolute evaluation.
TINY = ["learner.total_rounds=100", "run.tensorboard=false", "run.console=false", "run.plot=false"]


def run_swarm(tmp: Path, *overrides: str, forge: Callable[[Body], Body] | None = None) -> dict[str, list[RoundResult]]:
    """Peers of the marl recipe in memory; the last one sends ``forge``(its honest body)."""
    managers, _ = build_managers(load_recipe("marl/tiny", [*TINY, f"run.dir={tmp}", *overrides]), stream=io.StringIO())
    if forge is not None:
        liar = managers[-1].policy
        honest = liar.act
        liar.act = lambda inputs, stage, greedy=False: [forge(b) for b in honest(inputs, stage, greedy)]  # type: ignore[method-assign]
    return run_managers(managers)


def forged(body: Trajectory, **arrays: Any) -> Trajectory:
    return msgspec.structs.replace(body, **{k: Array.of(v) for k, v in arrays.items()})


def more_reward(body: Body) -> Body:
    assert isinstance(body, Trajectory)
    rewards = body.rewards.numpy().copy()
    rewards[3] += 1.0
    return forged(body, rewards=rewards)


@pytest.fixture(scope="module")
def trajectory_swarm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[RoundResult]]]:
    tmp = tmp_path_factory.mktemp("marl")
    return tmp, run_swarm(tmp, "swarm.num_peers=3", "game.max_rounds=2", "learner.eval_every=2", forge=more_reward)


def test_honest_peers_train_on_each_others_replayed_trajectories(trajectory_swarm: Any) -> None:
    _, results = trajectory_swarm
    for peer in ("peer-0", "peer-1"):
        for r in results[peer]:
            assert r.metrics["swarm/trajectories_used"] == 1.0  # the other honest peer's
            assert sorted(r.rewards) == ["peer-0", "peer-1"], "rewards only for bodies that replayed"
            assert r.metrics["train/env_steps"] == 8 * 25 * (r.round + 1)  # own steps, not the peers'


def test_a_forged_trajectory_is_dropped_and_counted_against_its_sender(trajectory_swarm: Any) -> None:
    _, results = trajectory_swarm
    for peer in ("peer-0", "peer-1"):
        assert [r.dropped for r in results[peer]] == [{"peer-2": 1}, {"peer-2": 1}]
        assert results[peer][-1].metrics["trust/dropped_refused"] == 2.0


def test_evaluation_writes_marl_eval_json(trajectory_swarm: Any) -> None:
    tmp, results = trajectory_swarm
    assert "eval/reward" in results["peer-0"][1].metrics and "eval/reward" not in results["peer-0"][0].metrics
    doc = json.loads((tmp / "marl_eval" / "ippo_seed_42000.json").read_text())
    run = doc["LevelBasedForaging"]["5x5-2p-1f"]["ff_ippo"]["seed_42000"]  # Mava's names (tests/test_marl_eval.py)
    assert run["step_0"]["step_count"] == 2 * 8 * 25 and len(run["step_0"]["episode_returns"]) == 8
    assert run["step_0"]["elapsed_time"] == 0.0
    assert run["step_0"]["mean_episode_return"] == [pytest.approx(results["peer-0"][1].metrics["eval/reward"])]


# --------------------------------------------------------------------------- the replay check itself
@pytest.fixture(scope="module")
def honest(trajectory_swarm: Any) -> tuple[MarlPolicy, StageInput, Trajectory, StageInput]:
    """A peer's checking policy, a task input, another peer's honest body for it, another round's input."""
    spec = resolve(load_recipe("marl/tiny", TINY))
    sender, policy = instantiate(spec["policy"], "policy"), instantiate(spec["policy"], "policy")
    data = instantiate(spec["data"], "data")
    assert isinstance(sender, MarlPolicy) and isinstance(policy, MarlPolicy) and isinstance(data, MarlData)
    inp, other = data.round_tasks(0)[0].input(0), data.round_tasks(1)[0].input(0)
    body = sender.act([inp], 0)[0]
    assert isinstance(body, Trajectory)
    return policy, inp, body, other


def shifted(body: Trajectory, field: str, step: int, delta: float) -> Trajectory:
    values = getattr(body, field).numpy().copy()
    values[step] = values[step] + delta if values.dtype != bool else ~values[step]
    return forged(body, **{field: values})


def first_masked(body: Trajectory) -> Trajectory:
    assert body.action_masks is not None
    t, e, a, action = np.argwhere(~body.action_masks.numpy())[0]
    actions = body.actions.numpy().copy()
    actions[t, e, a] = action
    return forged(body, actions=actions)


def cut(body: Trajectory) -> Trajectory:
    return Trajectory(body.task_id, body.input_digest, body.steps - 1, **{
        k: Array.of(getattr(body, k).numpy()[:-1]) for k in ("observations", "actions", "rewards", "dones", "action_masks", "logprobs")
    })  # fmt: skip


FORGERIES: dict[str, tuple[Callable[[Trajectory], Trajectory], str]] = {
    "a reward": (lambda b: shifted(b, "rewards", 3, 1.0), "rewards differ from the replay at step 3"),
    "an observation": (lambda b: shifted(b, "observations", 2, 1.0), "observations differ from the replay at step 2"),
    "a done": (lambda b: shifted(b, "dones", 24, 0), "dones differ from the replay at step 24"),
    "an action mask": (lambda b: shifted(b, "action_masks", 5, 0), "action_masks differ from the replay at step 5"),
    "swapped actions": (lambda b: forged(b, actions=b.actions.numpy()[:, ::-1]), "replay: "),
    "an out-of-range action": (lambda b: forged(b, actions=np.full_like(b.actions.numpy(), 6)), "actions outside [0, 6)"),
    "a masked action": (first_masked, "an action the environment forbids"),
    "a shorter rollout": (cut, "24 steps, this game plays 25"),
    "float64 rewards": (lambda b: forged(b, rewards=b.rewards.numpy().astype(np.float64)), "rewards: float64[8, 2] per step, expected float32[8, 2]"),
    "a NaN log-prob": (lambda b: shifted(b, "logprobs", 0, np.nan), "log-probs must be finite"),
}


def test_an_honest_trajectory_replays(honest: Any) -> None:
    policy, inp, body, _ = honest
    verifier_for(policy.env, 8, 25).forget()  # in one process the sender's own rollout is remembered: replay for real
    assert policy.check(body, inp) is None


@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_forged_trajectory_is_refused(honest: Any, name: str) -> None:
    policy, inp, body, _ = honest
    forge, reason = FORGERIES[name]
    refusal = policy.check(forge(body), inp)
    assert refusal is not None and reason in refusal


def test_a_trajectory_is_replayed_from_this_peers_task_seed(honest: Any) -> None:
    policy, _, body, other = honest  # the same actions, claimed for another round's environments
    assert (policy.check(body, other) or "").startswith("replay: ")


def test_a_refused_body_goes_through_the_drop_machinery(honest: Any) -> None:
    policy, inp, body, _ = honest
    state = GameState(0, "me")
    state.inputs[0] = {}
    state.tasks = {}
    drops = admit(state, 0, [inp], {"me": [body], "liar": [more_reward(body)]}, policy.check)
    assert [(d.peer_id, d.kind) for d in drops] == [("liar", "refused")] and "rewards differ" in drops[0].reason
    assert [r.peer_id for r in state.rollouts] == ["me"]


# --------------------------------------------------------------------------- parameters
def test_peer_parameters_are_checked_then_averaged(honest: Any) -> None:
    policy, inp, _, _ = honest
    good = sharing.to_body(policy.params, inp.task_id, inp.digest, 0)
    leaves = [a.numpy() for a in good.leaves]

    def with_leaf(i: int, value: Any) -> sharing.ParamsBody:
        return msgspec.structs.replace(good, leaves=tuple(Array.of(value) if j == i else a for j, a in enumerate(good.leaves)))

    assert sharing.problem(good, policy.params, 1.0) is None
    assert "not finite" in (sharing.problem(with_leaf(0, np.full_like(leaves[0], np.nan)), policy.params, 1.0) or "")
    assert "expected float32" in (sharing.problem(with_leaf(0, leaves[0].reshape(1, -1)), policy.params, 1.0) or "")
    assert "expected float32" in (sharing.problem(with_leaf(1, leaves[1].astype(np.float64)), policy.params, 1.0) or "")
    assert "more than 1.0" in (sharing.problem(with_leaf(2, leaves[2] + 5.0), policy.params, 1.0) or "")
    short = msgspec.structs.replace(good, leaves=good.leaves[:-1])
    assert "parameter arrays, this team has" in (sharing.problem(short, policy.params, 1.0) or "")
    moved = with_leaf(0, leaves[0] + 0.5)
    mean = sharing.aggregate(policy.params, [moved])
    np.testing.assert_allclose(jax.tree.leaves(mean)[0], leaves[0] + 0.25, rtol=1e-6)
    np.testing.assert_allclose(jax.tree.leaves(mean)[1], leaves[1])


def alternating(params: Any, size: float) -> list[np.ndarray]:
    """``params``' leaves moved by +-``size`` per element, the sign alternating."""
    leaves = [np.asarray(x) for x in jax.tree.leaves(params)]
    return [(x + size * np.where(np.arange(x.size).reshape(x.shape) % 2, 1.0, -1.0)).astype(x.dtype) for x in leaves]


def params_body(like: sharing.ParamsBody, leaves: Sequence[np.ndarray]) -> sharing.ParamsBody:
    return msgspec.structs.replace(like, leaves=tuple(Array.of(x) for x in leaves))


def test_a_forged_parameter_body_is_refused_and_counted(honest: Any) -> None:
    policy, inp, _, _ = honest  # max_param_distance as the recipe configures it
    good = sharing.to_body(policy.params, inp.task_id, inp.digest, 0)
    poisoned = params_body(good, alternating(policy.params, 0.99))  # within the old per-element bound (1.0)
    assert policy.check(good, inp) is None
    state = GameState(0, "me")
    state.inputs[0] = {}
    state.tasks = {}
    drops = admit(state, 0, [inp], {"me": [good], "liar": [poisoned]}, policy.check)
    assert [(d.peer_id, d.kind) for d in drops] == [("liar", "refused")] and "away from this peer's" in drops[0].reason
    assert [r.peer_id for r in state.rollouts] == ["me"]


def test_a_slow_drift_attacker_cannot_move_the_weights_far(honest: Any) -> None:
    policy, inp, _, _ = honest
    start = [np.asarray(x) for x in jax.tree.leaves(policy.params)]
    own = policy.params
    template = sharing.to_body(own, inp.task_id, inp.digest, 0)
    for size in (0.3, 0.1):  # per element, each round from the victim's current weights: well inside the old 1.0
        own, accepted = policy.params, 0
        for _ in range(8):
            drift = params_body(template, alternating(own, size))
            if sharing.problem(drift, own, policy.max_param_distance) is None:
                accepted += 1
                own = sharing.aggregate(own, [drift], 1)
        moved = max(float(np.abs(np.asarray(x) - y).max()) for x, y in zip(jax.tree.leaves(own), start))
        assert moved <= 0.05, f"+-{size}/round moved a weight by {moved:.3f} ({accepted}/8 accepted)"
    # a liar inside the relative bound, next to one honest peer: the median of three ignores it
    own = policy.params
    for _ in range(8):
        liar = params_body(template, [x * np.float32(1.0 + 0.9 * policy.max_param_distance) for x in jax.tree.leaves(own)])
        assert sharing.problem(liar, own, policy.max_param_distance) is None
        own = sharing.aggregate(own, [sharing.to_body(own, inp.task_id, inp.digest, 0), liar], 2)
    jax.tree.map(np.testing.assert_array_equal, own, policy.params)


def test_median_aggregation_ignores_one_outlier_and_caps_the_peers() -> None:
    own = {"w": np.array([0.0, 1.0, 2.0], np.float32), "b": np.array([0.0], np.float32)}
    body = sharing.to_body(own, "t", "d", 0)
    honest_peer = params_body(body, [np.array([0.2], np.float32), np.array([0.2, 1.2, 2.2], np.float32)])  # leaves: b, w
    outlier = params_body(body, [np.array([-50.0], np.float32), np.array([100.0, -100.0, 100.0], np.float32)])
    median = sharing.aggregate(own, [honest_peer, outlier])
    np.testing.assert_allclose(median["w"], [0.2, 1.0, 2.2], rtol=1e-6)  # per coordinate, the middle value
    np.testing.assert_allclose(median["b"], [0.0])
    mean = sharing.aggregate(own, [honest_peer])  # median of two: their mean (honest sharing still averages)
    np.testing.assert_allclose(mean["w"], [0.1, 1.1, 2.1], rtol=1e-6)
    capped = sharing.aggregate(own, [outlier, honest_peer], 1)  # at most one peer: the closest
    np.testing.assert_allclose(capped["w"], [0.1, 1.1, 2.1], rtol=1e-6)
    assert sharing.aggregate(own, [outlier], 0)["w"].tolist() == [0.0, 1.0, 2.0]


def test_parameter_sharing_averages_each_round(tmp_path: Path) -> None:
    results = run_swarm(tmp_path, "policy.share=parameters", "game.max_rounds=2", "learner.eval_every=0")
    for peer in ("peer-0", "peer-1"):
        assert [r.metrics["swarm/params_averaged"] for r in results[peer]] == [1.0, 1.0]
        assert all(r.dropped == {} and r.metrics["swarm/trajectories_used"] == 0.0 for r in results[peer])


def test_isolated_peers_use_no_peer_data(tmp_path: Path) -> None:
    results = run_swarm(tmp_path, "policy.share=none", "game.max_rounds=1", "learner.eval_every=0")
    assert all(r.metrics["swarm/trajectories_used"] == 0.0 for rs in results.values() for r in rs)


def test_policy_and_learner_checkpoints_restore_weights_and_random_streams(honest: Any, tmp_path: Path) -> None:
    from genrl_swarm.paradigms.marl.learner import MarlLearner

    spec = resolve(load_recipe("marl/tiny", TINY))
    policy, _, _, _ = honest
    learner = instantiate(spec["learner"], "learner", policy=policy)
    policy.save(tmp_path)
    learner.save(tmp_path)
    other = instantiate(spec["policy"], "policy")
    other_learner = instantiate(spec["learner"], "learner", policy=other)
    assert isinstance(other, MarlPolicy) and isinstance(other_learner, MarlLearner)
    other.params = jax.tree.map(lambda x: x + 1.0, other.params)
    other.load(tmp_path)
    other_learner.load(tmp_path)
    jax.tree.map(np.testing.assert_array_equal, other.params, policy.params)
    jax.tree.map(np.testing.assert_array_equal, other_learner.state, learner.state)
    np.testing.assert_array_equal(other.key, policy.key)
    np.testing.assert_array_equal(other_learner.key, learner.key)
    assert not np.array_equal(policy.key, learner.key), "acting and minibatch order draw from different streams"
