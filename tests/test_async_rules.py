"""The async trainer's rules at their edges (issue 18): every recipe limit accepted at the limit and
refused one past it with the one-line error a user sees, the staleness rule at each lag, the
staleness metrics and their checkpoint form, and the buffer's capacity accounting. Ray-free, fast."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from genrl_swarm.core import TokenRollout, TokenSample
from genrl_swarm.paradigms.lm.async_grpo.buffer import Group, RolloutBuffer
from genrl_swarm.paradigms.lm.async_grpo.config import PipelineConfig, RayConfig
from genrl_swarm.paradigms.lm.async_grpo.staleness import StalenessStats, weight


def _group(version: int) -> Group:
    body = TokenRollout("t", "d", (1,), (TokenSample((2,), (-0.1,), "stop"),), version, "fp")
    return Group(body, (1.0,), version, "worker-0")


# (field, accepted at the limit, refused just past it, the error a user sees for the refused value)
PIPELINE_LIMITS: list[tuple[str, object, object, str]] = [
    ("num_workers", 0, -1, "pipeline.num_workers must be >= 0, got -1"),
    ("max_staleness", 0, -1, "pipeline.max_staleness must be >= 0, got -1"),
    ("stale", "downweight", "Downweight", "pipeline.stale must be drop or downweight, got 'Downweight'"),
    ("downweight", 1.0, 1.01, "pipeline.downweight must be in (0, 1], got 1.01"),
    ("downweight", 1e-9, 0.0, "pipeline.downweight must be in (0, 1], got 0.0"),
    ("batch_groups", 1, 0, "pipeline.batch_groups must be >= 1, got 0"),
    ("worker_cpus", 0.01, 0.0, "pipeline.worker_cpus must be > 0, got 0.0"),
    ("learner_cpus", 0.01, 0.0, "pipeline.learner_cpus must be > 0, got 0.0"),
    ("worker_gpus", 0.0, -0.5, "pipeline.worker_gpus must be >= 0, got -0.5"),
    ("learner_gpus", 0.0, -0.5, "pipeline.learner_gpus must be >= 0, got -0.5"),
    ("weight_sync", "nccl", "NCCL", "pipeline.weight_sync must be object_store or nccl, got 'NCCL'"),
    ("task_offset", 0, -1, "pipeline.task_offset must be >= 0, got -1"),
    ("timeout", 0.5, 0.0, "pipeline.timeout must be > 0 and finite, got 0.0"),
    ("timeout", 9_999_999.0, 1e7, "pipeline.timeout must be > 0 and finite, got 10000000.0"),
]


@pytest.mark.parametrize(("name", "ok", "bad", "message"), PIPELINE_LIMITS)
def test_pipeline_limit_accepts_the_edge_and_refuses_one_past_it(name: str, ok: object, bad: object, message: str) -> None:
    """An off-by-one in a rule would either refuse a recipe that is fine or start Ray on one that is not."""
    assert getattr(PipelineConfig(**{name: ok}), name) == ok  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        PipelineConfig(**{name: bad})  # type: ignore[arg-type]


def test_buffer_capacity_may_equal_batch_groups_but_not_fall_below() -> None:
    """A buffer exactly one batch big can still feed the learner; one smaller never could."""
    assert PipelineConfig(batch_groups=3, buffer_capacity=3).buffer_capacity == 3
    with pytest.raises(ValueError, match=r"^pipeline\.buffer_capacity must be >= batch_groups, got 2$"):
        PipelineConfig(batch_groups=3, buffer_capacity=2)


def test_ray_num_cpus_accepts_one_and_null_and_refuses_zero() -> None:
    """One CPU is a valid (if small) local Ray; zero would hang waiting for resources."""
    assert RayConfig(num_cpus=1).num_cpus == 1 and RayConfig().num_cpus is None
    with pytest.raises(ValueError, match=r"^ray\.num_cpus must be >= 1 or null, got 0$"):
        RayConfig(num_cpus=0)


@pytest.mark.parametrize(("lag", "drop", "down"), [(0, 1.0, 1.0), (2, 1.0, 1.0), (3, None, 0.3), (4, None, 0.09), (5, None, 0.027)])
def test_staleness_rule_at_each_lag(lag: int, drop: float | None, down: float) -> None:
    """Within the bound a group trains at full weight; past it, drop discards it and downweight
    multiplies by the factor once per extra version."""
    assert weight(lag, 2, "drop", 0.3) == drop
    assert weight(lag, 2, "downweight", 0.3) == pytest.approx(down)


def test_staleness_metrics_report_the_distribution_mean_and_max() -> None:
    """The dashboard reads these keys; the mean is per group, not per distinct lag."""
    stats = StalenessStats()
    stats.record([0, 0, 0], [1.0, 1.0, 1.0])
    stats.record([2, 2, 3], [1.0, 1.0, 0.5])
    stats.dropped = 2
    assert stats.metrics() == {
        "async/staleness_0": 3.0,
        "async/staleness_2": 2.0,
        "async/staleness_3": 1.0,
        "async/staleness_mean": 7 / 6,  # (0 * 3 + 2 * 2 + 3) / 6 groups
        "async/staleness_max": 3.0,
        "async/stale_dropped": 2.0,
        "async/stale_downweighted": 1.0,
    }
    stats.record([1], [0.25])
    assert stats.downweighted == 2  # counts accumulate across batches


def test_empty_staleness_metrics_are_zero() -> None:
    """Before the first update the metrics exist and are zero rather than raising."""
    assert StalenessStats().metrics() == {
        "async/staleness_mean": 0.0,
        "async/staleness_max": 0.0,
        "async/stale_dropped": 0.0,
        "async/stale_downweighted": 0.0,
    }


def test_staleness_stats_survive_a_checkpoint_round_trip() -> None:
    """A resumed pipeline continues its counts (JSON keys are strings); a missing section is zero."""
    stats = StalenessStats(Counter({0: 5, 2: 1}), dropped=3, downweighted=1)
    saved = stats.as_dict()
    assert saved == {"trained": {"0": 5, "2": 1}, "dropped": 3, "downweighted": 1}
    assert StalenessStats.from_dict(saved) == stats
    assert StalenessStats.from_dict({}) == StalenessStats()


def test_buffer_counts_every_eviction_across_puts() -> None:
    """Eviction totals add up over the run (the pipeline's no-group-lost check relies on it),
    and filling exactly to capacity evicts nothing."""
    buf = RolloutBuffer(capacity=2, max_staleness=9)
    buf.put([_group(0), _group(1)])
    assert buf.evicted == 0 and len(buf) == 2
    buf.put([_group(2)])
    buf.put([_group(3), _group(4)])
    assert buf.evicted == 3 and len(buf) == 2
    taken = buf.take(2, learner_version=4)
    assert taken is not None and [g.version for g in taken.groups] == [3, 4]
