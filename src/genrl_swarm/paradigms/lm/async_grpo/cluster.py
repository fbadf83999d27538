"""Connecting to Ray and reserving the pipeline's resources in one placement group.

``ray.init()`` starts a local Ray by default; ``ray.address`` joins an existing cluster. The
learner and the workers get one bundle each, packed (one node when it fits), so the pipeline
starts whole or not at all instead of half its actors waiting for CPUs."""

from __future__ import annotations

import os
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from genrl_swarm.paradigms.lm.async_grpo.config import RayConfig

#: Environment the actors need to find models and caches as the driver does.
PASSED_ENV = ("GENRL_SWARM_CACHE", "HF_HUB_OFFLINE", "HF_HOME", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM")


#: What a Ray this process starts changes from Ray's defaults. Ray runs its workers at nice 15, below
#: its own daemons; here the workers are the pipeline (sampling, training), so on a host whose cores
#: are busy (a peer's own exchange and scoring, another job) any nice-0 process starved them and a
#: round's calls timed out (seen at load 40: 120 s waiting for two actors to start). They run at the
#: driver's priority instead. A cluster joined with ``ray.address`` keeps its own settings.
LOCAL_SYSTEM_CONFIG = {"worker_niceness": 0}


def connect(cfg: RayConfig, log_to_driver: bool = True) -> bool:
    """Start or join Ray unless this process already did; True when this call started it."""
    if ray.is_initialized():
        return False
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    local = cfg.address is None
    ray.init(
        address=cfg.address, num_cpus=cfg.num_cpus if local else None, namespace=cfg.namespace, include_dashboard=False,
        runtime_env={"env_vars": env} if env else None, log_to_driver=log_to_driver, _system_config=LOCAL_SYSTEM_CONFIG if local else None,
    )  # fmt: skip
    return True


def reserve(bundles: list[dict[str, float]], timeout: float) -> PlacementGroup:
    """A PACK placement group with these bundles, ready, or a one-line error saying what is missing."""
    group = placement_group(bundles, strategy="PACK")
    try:
        ray.get(group.ready(), timeout=timeout)
    except ray.exceptions.GetTimeoutError as e:
        remove_placement_group(group)
        wanted = {k: sum(b.get(k, 0.0) for b in bundles) for k in ("CPU", "GPU")}
        raise RuntimeError(f"ray: cannot reserve {wanted} for the pipeline within {timeout:.0f}s (available: {ray.available_resources()})") from e
    return group


def bundle(cpus: float, gpus: float) -> dict[str, float]:
    return {"CPU": cpus} | ({"GPU": gpus} if gpus > 0 else {})


def placed(group: PlacementGroup, index: int, cpus: float, gpus: float) -> dict[str, Any]:
    """Actor options that put it in bundle ``index`` of ``group``."""
    strategy = PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=index)
    return {"scheduling_strategy": strategy, "num_cpus": cpus, "num_gpus": gpus}


def release(group: PlacementGroup | None) -> None:
    if group is not None:
        remove_placement_group(group)
