"""The async trainer's pieces that need no Ray: staleness, the versioned buffer, the config
checks, the down-weighted GRPO step and the Hydra group (the pipeline itself: test_async_pipeline)."""

from __future__ import annotations

import pytest

from genrl_swarm.config import RecipeError, load_recipe, resolve, validate
from genrl_swarm.core import TokenRollout, TokenSample
from genrl_swarm.paradigms.lm.async_grpo.buffer import Group, RolloutBuffer
from genrl_swarm.paradigms.lm.async_grpo.config import PipelineConfig, RayConfig
from genrl_swarm.paradigms.lm.async_grpo.staleness import lag, weight


def group(version: int, source: str = "worker-0", reward: float = 1.0) -> Group:
    body = TokenRollout("t", "d", (1, 2), (TokenSample((3, 4), (-0.5, -0.5), "stop"), TokenSample((5,), (-0.1,), "stop")), version, "fp")
    return Group(body, (reward, 0.0), version, source)


def test_staleness_weight_drops_or_halves_past_the_bound() -> None:
    assert lag(5, 3) == 2 and lag(3, 5) == 0
    assert weight(2, 2, "drop", 0.5) == 1.0 and weight(3, 2, "drop", 0.5) is None
    assert weight(4, 2, "downweight", 0.5) == 0.25


def test_buffer_drops_groups_past_max_staleness_and_counts_them() -> None:
    buf = RolloutBuffer(capacity=16, max_staleness=1)
    buf.put([group(0), group(1), group(2), group(3)])
    taken = buf.take(2, learner_version=3)  # versions 0 and 1 are 3 and 2 behind: over the bound of 1
    assert taken is not None
    assert [g.version for g in taken.groups] == [2, 3] and taken.staleness == (1, 0) and taken.weights == (1.0, 1.0)
    assert buf.stats.dropped == 2 and len(buf) == 0
    assert buf.stats.metrics()["async/staleness_max"] == 1.0


def test_buffer_waits_for_a_full_batch_of_admissible_groups() -> None:
    buf = RolloutBuffer(capacity=16, max_staleness=0)
    buf.put([group(0), group(1)])
    assert buf.take(2, learner_version=1) is None  # only the version-1 group is fresh enough
    assert len(buf) == 1 and buf.stats.dropped == 1
    buf.put([group(1)])
    taken = buf.take(2, learner_version=1)
    assert taken is not None and taken.staleness == (0, 0)


def test_buffer_downweights_instead_of_dropping_when_configured() -> None:
    buf = RolloutBuffer(capacity=16, max_staleness=1, stale="downweight", downweight=0.5)
    buf.put([group(0), group(4)])
    taken = buf.take(2, learner_version=4)
    assert taken is not None and taken.staleness == (4, 0) and taken.weights == (0.125, 1.0)
    assert buf.stats.dropped == 0 and buf.stats.downweighted == 1


def test_buffer_capacity_evicts_the_oldest_and_counts_them() -> None:
    buf = RolloutBuffer(capacity=2, max_staleness=9)
    buf.put([group(3), group(1), group(2)])
    assert buf.evicted == 1 and sorted(g.version for g in buf._items) == [2, 3]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_staleness": -1}, "pipeline.max_staleness must be >= 0, got -1"),
        ({"stale": "ignore"}, "pipeline.stale must be drop or downweight, got 'ignore'"),
        ({"batch_groups": 8, "buffer_capacity": 4}, "pipeline.buffer_capacity must be >= batch_groups, got 4"),
        ({"weight_sync": "tcp"}, "pipeline.weight_sync must be object_store or nccl, got 'tcp'"),
    ],
)
def test_bad_pipeline_config_is_one_line(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$".replace("(", r"\(").replace(")", r"\)")):
        PipelineConfig(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ray.num_cpus must be >= 1 or null, got 0"):
        RayConfig(num_cpus=0)


def test_trainer_group_selects_the_async_learner_and_sync_changes_nothing() -> None:
    spec = resolve(load_recipe("reasoning_gym", ["trainer=async_grpo", "learner.pipeline.max_staleness=1", "learner.ray.address=auto"]))
    validate(spec)
    learner = spec["learner"]
    assert learner["_target_"] == "genrl_swarm.paradigms.lm.async_grpo.peer.AsyncGRPOLearner"
    assert learner["pipeline"]["max_staleness"] == 1 and learner["ray"]["address"] == "auto"
    assert learner["grpo"]["off_policy"] == "tis" and learner["data"]["_target_"] == spec["data"]["_target_"]  # the recipe's own sections stay
    assert resolve(load_recipe("reasoning_gym", ["trainer=sync"])) == resolve(load_recipe("reasoning_gym"))
    with pytest.raises(RecipeError, match=r"^learner\.pipeline\.max_staleness: must be >= 0, got -1$"):
        validate(resolve(load_recipe("reasoning_gym", ["trainer=async_grpo", "learner.pipeline.max_staleness=-1"])))


def test_downweighted_group_scales_its_advantages() -> None:
    """``stale: downweight`` reaches the loss: the group's advantages, and only its, are scaled."""
    from genrl_swarm.paradigms.lm.async_grpo.trainer import WeightedGRPOLearner, as_round
    from genrl_swarm.paradigms.lm.policy import LMPolicy

    policy = LMPolicy("tiny-random", {"num_generations": 2, "max_new_tokens": 4}, seed=0)
    learner = WeightedGRPOLearner(policy, {"num_local": -1}, seed=0)
    old, fresh = policy.rollouts([_input("Calculate 3 + 4."), _input("Calculate 2 * 5.")])
    state, rewards = as_round([Group(old, (1.0, 0.0), 0, "worker-0"), Group(fresh, (0.0, 1.0), 0, "worker-0")], 0)
    plain = learner.samples(state, learner.select(state, rewards))
    learner.group_weights = {id(old): 0.25}
    scaled = learner.samples(state, learner.select(state, rewards))
    assert len(plain) == 4 and all(abs(s.advantage) > 0 for s in plain)
    factors = [0.25 if any(s.completion_ids is x.completion_ids for x in old.samples) else 1.0 for s in plain]
    assert [s.advantage for s in scaled] == pytest.approx([f * s.advantage for f, s in zip(factors, plain)])
    assert factors.count(0.25) == 2


def _input(prompt: str):  # type: ignore[no-untyped-def]
    from genrl_swarm.core import Task

    return Task.create(prompt, answer="7").input(0)
