"""The async trainer's recipe sections: ``learner.pipeline`` (what overlaps, how stale) and
``learner.ray`` (where it runs). Checked at construction so a bad recipe fails in one line
before Ray starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Stale = Literal["drop", "downweight"]
Sync = Literal["object_store", "nccl"]


def _check(section: str, rules: tuple[tuple[str, bool, str, object], ...]) -> None:
    for name, ok, rule, value in rules:
        if not ok:
            raise ValueError(f"{section}.{name} must be {rule}, got {value!r}")


@dataclass
class PipelineConfig:
    """How the pipeline overlaps generation and training.

    ``batch_groups`` groups (one prompt's ``num_generations`` completions each) make one update.
    A worker may start a generation at weights version v only while the groups started so far
    stay within (v - start + max_staleness + 1) * batch_groups (AReaL's rule), so most groups
    arrive within the bound; the buffer enforces it exactly: a group older than ``max_staleness``
    versions is dropped (``stale: drop``) or kept with its advantages scaled by
    ``downweight ** (staleness - max_staleness)`` (``stale: downweight``)."""

    num_workers: int = 1
    max_staleness: int = 2
    stale: Stale = "drop"
    downweight: float = 0.5
    batch_groups: int = 4
    buffer_capacity: int = 256  # groups; the oldest are evicted (and counted) past it
    worker_cpus: float = 1.0
    learner_cpus: float = 1.0
    worker_gpus: float = 0.0
    learner_gpus: float = 0.0
    weight_sync: Sync = "object_store"  # nccl: broadcast from the learner (GPUs only, untested here)
    trainable_only: bool = True  # ship only parameters that train (LoRA adapters when LoRA is on)
    task_offset: int = 1_000_000  # workers draw data.round_tasks(task_offset + k): apart from the game's rounds
    timeout: float = 600.0  # seconds any single Ray call may block
    model: str | None = None  # the workers' model when it differs from the peer's path (a cluster)
    act_on_workers: bool = True  # the game's own rounds (what the peer shares) are sampled on the workers

    def __post_init__(self) -> None:
        _check("pipeline", (
            ("num_workers", self.num_workers >= 0, ">= 0", self.num_workers),
            ("max_staleness", self.max_staleness >= 0, ">= 0", self.max_staleness),
            ("stale", self.stale in ("drop", "downweight"), "drop or downweight", self.stale),
            ("downweight", 0 < self.downweight <= 1, "in (0, 1]", self.downweight),
            ("batch_groups", self.batch_groups >= 1, ">= 1", self.batch_groups),
            ("buffer_capacity", self.buffer_capacity >= self.batch_groups, ">= batch_groups", self.buffer_capacity),
            ("worker_cpus", self.worker_cpus > 0, "> 0", self.worker_cpus),
            ("learner_cpus", self.learner_cpus > 0, "> 0", self.learner_cpus),
            ("worker_gpus", self.worker_gpus >= 0, ">= 0", self.worker_gpus),
            ("learner_gpus", self.learner_gpus >= 0, ">= 0", self.learner_gpus),
            ("weight_sync", self.weight_sync in ("object_store", "nccl"), "object_store or nccl", self.weight_sync),
            ("task_offset", self.task_offset >= 0, ">= 0", self.task_offset),
            ("timeout", 0 < self.timeout < 1e7, "> 0 and finite", self.timeout),
        ))  # fmt: skip


@dataclass
class RayConfig:
    """Where the actors run: ``address: null`` starts Ray locally (``num_cpus`` of this machine,
    all when null); ``address: auto`` or ``ray://host:10001`` joins an existing cluster."""

    address: str | None = None
    num_cpus: int | None = None
    namespace: str = "genrl_swarm"

    def __post_init__(self) -> None:
        _check("ray", (("num_cpus", self.num_cpus is None or self.num_cpus >= 1, ">= 1 or null", self.num_cpus),))
