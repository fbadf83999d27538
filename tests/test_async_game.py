"""The swarm angle of ``trainer=async_grpo``, through the launcher: two in-process peers, each a
Ray pipeline (a learner and a rollout worker), play the reasoning_gym recipe on the tiny model.

What is attacked: the rollouts a peer shares must be sampled on its rollout worker (the game
process never samples for training), they must reach the other peer and be scored there, the
swarm's groups must reach the learner through the buffer, and a round must not be lost when the
worker dies under it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")
transformers = pytest.importorskip("transformers")  # the peers and workers are LMPolicy replicas

pytest.importorskip("torch")
from genrl_swarm.config import load_recipe  # noqa: E402
from genrl_swarm.core import GameManager, TokenRollout  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.acting import WorkerPolicy  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.cluster import connect  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.config import RayConfig  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.peer import AsyncGRPOLearner  # noqa: E402
from genrl_swarm.run.launcher import build_managers, run_managers  # noqa: E402

pytestmark = pytest.mark.slow  # a Ray cluster

ROUNDS = 3


@pytest.fixture(scope="module")
def managers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GameManager]]:
    connect(RayConfig(num_cpus=2), log_to_driver=False)  # at the product's worker priority
    overrides = [
        f"run.dir={tmp_path_factory.mktemp('async_game') / 'run'}", "run.tensorboard=false", "run.console=false",
        "run.plot=false", "run.checkpoint_every=0", "trainer=async_grpo", "policy.model=tiny-random",
        "policy.sampling.max_new_tokens=8", f"game.max_rounds={ROUNDS}", "game.mode=train", "data.tasks_per_round=2",
        "data.datasets=[basic_arithmetic]", "learner.grpo.learning_rate=1e-3", "learner.pipeline.batch_groups=2",
        "learner.pipeline.worker_cpus=0.5", "learner.pipeline.learner_cpus=0.5", "learner.pipeline.timeout=120",
    ]  # fmt: skip
    built, _ = build_managers(load_recipe("reasoning_gym", overrides))
    yield built
    for m in built:
        assert isinstance(m.learner, AsyncGRPOLearner)
        m.learner.close()
    ray.shutdown()


def _pipe(m: GameManager) -> Any:
    assert isinstance(m.learner, AsyncGRPOLearner)
    return m.learner.pipe


def test_shared_rollouts_are_sampled_on_the_workers_and_reach_the_swarm_and_the_learner(managers: list[GameManager]) -> None:
    local_samples: list[int] = []
    for m in managers:
        assert isinstance(m.policy, WorkerPolicy)  # the launcher asked the learner which policy acts
        _pipe(m).record_batches = True
        local = m.policy.local
        sample = local.rollouts
        local.rollouts = lambda inputs, greedy=False, _s=sample: local_samples.append(len(inputs)) or _s(inputs, greedy)  # type: ignore[method-assign]
    results = run_managers(managers)
    assert local_samples == []  # not one training rollout sampled in the game process
    ids = sorted(m.peer_id for m in managers)
    for m in managers:
        pipe = _pipe(m)
        assert pipe.counters.acts == ROUNDS and pipe.counters.act_failures == 0 and m.policy.fallbacks == 0
        rounds = results[m.peer_id]
        assert [r.round for r in rounds] == list(range(ROUNDS))
        assert all(sorted(r.rewards) == ids for r in rounds)  # each peer scored the other's worker rollouts
        assert pipe.counters.external_groups == ROUNDS * 2 * 2  # own and swarm groups went into the buffer
    # the swarm's groups train the learner too: wait (bounded) for a batch holding the other peer's
    for m in managers:
        other = next(p for p in ids if p != m.peer_id)
        pipe = _pipe(m)
        for _ in range(600):
            if any(g.source == other for b in list(pipe.batches) for g in b.groups):
                break
            time.sleep(0.1)  # the driver keeps training in its thread
        else:
            pytest.fail(f"{m.peer_id}'s learner never trained on a group from {other}")


def test_a_worker_dying_under_a_round_loses_nothing(managers: list[GameManager]) -> None:
    m = managers[0]
    pipe = _pipe(m)
    inputs = [t.input(0) for t in m.data.round_tasks(ROUNDS)]
    ray.kill(pipe.workers[0], no_restart=False)  # Ray restarts it; the round's call fails or waits for it
    bodies = m.policy.act(inputs, 0)
    assert len(bodies) == len(inputs) and all(isinstance(b, TokenRollout) for b in bodies)
    assert [b.input_digest for b in bodies] == [i.digest for i in inputs]
    assert pipe.counters.acts + pipe.counters.act_failures == ROUNDS + 1
    assert m.policy.fallbacks == pipe.counters.act_failures


def test_evaluation_stays_on_the_peer(managers: list[GameManager]) -> None:
    m = managers[1]
    before = _pipe(m).counters.acts
    inputs = [t.input(0) for t in m.data.round_tasks(0)]
    greedy = m.policy.act(inputs, 0, greedy=True)
    assert all(len(b.samples) == 1 for b in greedy if isinstance(b, TokenRollout))
    assert _pipe(m).counters.acts == before
