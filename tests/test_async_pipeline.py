"""The Ray pipeline end to end on the tiny model: weight versions reach the workers, the
staleness bound holds, a killed worker loses only its generation in flight, max_staleness=0
gives the synchronous learner's update, and checkpoints resume.

One Ray instance and one pipeline (a learner and two workers, max_staleness=0) serve the whole
module: starting actors is what costs time on a small machine. The tests run in file order and
each continues the pipeline where the previous left it."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")
transformers = pytest.importorskip("transformers")  # the workers are LMPolicy replicas (bound: needed whether or not lm imports it at module level)

from genrl_swarm.paradigms.lm.async_grpo.cluster import connect  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.config import PipelineConfig, RayConfig  # noqa: E402

pytest.importorskip("torch")
from genrl_swarm.core import GameState, RewardManager, Rollout, RoundRewards, ScoredRollout, StageInput, Task  # noqa: E402
from genrl_swarm.data.reasoning_gym import ReasoningGymData  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.pipeline import AsyncPipeline  # noqa: E402
from genrl_swarm.paradigms.lm.learner import GRPOLearner  # noqa: E402
from genrl_swarm.paradigms.lm.policy import LMPolicy  # noqa: E402

pytestmark = pytest.mark.slow  # a Ray cluster

POLICY = {"model": "tiny-random", "sampling": {"num_generations": 4, "max_new_tokens": 12}}
GRPO = {"learning_rate": 1e-3, "num_local": -1, "num_external": 0, "micro_batch_size": 4}
SEED = 5


class Digits(RewardManager):
    """A reward the tiny model's samples differ on (digits per completion): every group has signal."""

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        return [sum(c.isdigit() for c in text) / 8 + 0.01 * len(text) for text in rollout.texts]


@pytest.fixture(scope="module")
def pipe() -> Iterator[AsyncPipeline]:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
    connect(RayConfig(num_cpus=2), log_to_driver=False)  # at the product's worker priority
    data = ReasoningGymData(["basic_arithmetic"], tasks_per_round=2, seed=1, dataset_config={"basic_arithmetic": {"max_terms": 2, "max_digits": 1}})
    cfg = PipelineConfig(num_workers=2, max_staleness=0, batch_groups=2, worker_cpus=0.5, learner_cpus=1.0, timeout=120.0)
    p = AsyncPipeline.start(cfg, POLICY, GRPO, data, Digits(), seed=SEED)
    p.record_batches = True
    yield p
    p.shutdown()
    ray.shutdown()


def _params(state: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in state.items()}


def test_weight_versions_increase_and_workers_sample_with_them(pipe: AsyncPipeline) -> None:
    pipe.run(updates=3, seconds=240)
    updates = [e.version for e in pipe.events if e.kind == "update"]
    used = [e.used_version for e in pipe.events if e.kind == "generate"]
    assert updates == sorted(updates) and updates[-1] >= 2, updates
    assert used == sorted(used) and used[0] == 0 and used[-1] >= 1, used  # each generation with the newest weights
    # A worker's weights after it loads version v are exactly the learner's published ones.
    version, published = pipe.weights()
    result = ray.get(pipe.workers[0].step.remote(pipe.cfg.task_offset + 10_000, version, list(pipe._box)), timeout=120)
    assert result.loaded_version == version
    mine = _params(ray.get(pipe.workers[0].parameters.remote(), timeout=120))
    assert published is not None and mine.keys() == published.keys()
    assert all(np.array_equal(mine[k], np.asarray(published[k])) for k in mine)


def test_staleness_never_exceeds_the_bound(pipe: AsyncPipeline) -> None:
    pipe.run(updates=2, seconds=240)
    staleness = [s for batch in pipe.batches for s in batch.staleness]
    assert staleness and max(staleness) <= pipe.cfg.max_staleness, staleness
    assert pipe.buffer.stats.trained[0] == len(staleness)


def test_max_staleness_zero_gives_the_synchronous_learners_update(pipe: AsyncPipeline) -> None:
    """Replay every batch the pipeline trained on through the synchronous GRPOLearner, from the
    same initial weights and seed: the published weights must match."""
    policy = LMPolicy(**POLICY, seed=SEED)  # type: ignore[arg-type]
    learner = GRPOLearner(policy, GRPO, seed=SEED)
    initial = {n: p.detach().clone().numpy() for n, p in policy.model.named_parameters()}
    for k, batch in enumerate(pipe.batches):
        scored = tuple(ScoredRollout(Rollout("me", k, 0, g.body, g.texts), g.rewards) for g in batch.groups)
        learner.train(GameState(k, "me"), RoundRewards(k, scored))
        policy.load_weights(learner.weights())
    version, published = pipe.weights()
    assert published is not None and version == learner.version
    ours = {n: p.detach().numpy() for n, p in policy.model.named_parameters()}
    assert max(float(np.abs(ours[n] - initial[n]).max()) for n in ours) > 1e-3  # it did learn
    worst = max(float(np.abs(ours[n] - np.asarray(published[n])).max()) for n in ours)
    assert worst < 1e-5, worst


def test_killing_a_worker_loses_only_its_generation_in_flight(pipe: AsyncPipeline) -> None:
    before = pipe.counters.worker_failures, pipe.counters.discarded_groups, pipe.version
    pipe._dispatch()  # a generation starts on a worker...
    (flight,) = pipe._flights.values()
    ray.kill(pipe.workers[flight.worker], no_restart=False)  # ...which dies with it in flight
    pipe.run(updates=2, seconds=240)
    c = pipe.counters
    assert c.worker_failures == before[0] + 1 and c.discarded_groups == before[1] + pipe.step_groups
    assert c.discarded_completions == c.discarded_groups * 4
    assert pipe.version >= before[2] + 2  # the learner went on
    in_flight = sum(f.groups for f in pipe._flights.values())
    assert c.draws * pipe.step_groups == c.groups + c.discarded_groups + in_flight  # every draw accounted for
    trained = sum(len(b.groups) for b in pipe.batches)
    assert c.groups == trained + len(pipe.buffer) + pipe.buffer.stats.dropped + pipe.buffer.evicted  # nothing else lost
    assert _ready(pipe.workers[flight.worker]) == (flight.worker, True)  # Ray restarted it


def _ready(worker: Any) -> Any:
    """The worker's answer once it is back (a restart under load takes seconds)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return ray.get(worker.ready.remote(), timeout=120)
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_checkpoint_resume_restores_the_learner_and_republishes(pipe: AsyncPipeline, tmp_path: Path) -> None:
    pipe.save(tmp_path / "ckpt")
    version, saved = pipe.weights()
    updates = pipe.counters.updates
    pipe.run(updates=1, seconds=240)
    assert pipe.version == version + 1
    pipe.load(tmp_path / "ckpt")
    assert pipe.version == version and pipe.counters.updates == updates
    again_version, again = pipe.weights()
    assert again_version == version and saved is not None and again is not None
    assert all(np.array_equal(np.asarray(again[k]), np.asarray(saved[k])) for k in saved)
    pipe.run(updates=1, seconds=240)  # and training continues from there
    assert pipe.version == version + 1
    used = [e.used_version for e in pipe.events if e.kind == "generate"][-1]
    assert used == version  # the workers sampled with the restored weights
