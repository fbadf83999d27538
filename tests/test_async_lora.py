"""LoRA with trainer=async_grpo: every replica (learner, rollout workers, the peer's own policy)
carries the same adapters on the same base weights, and only the adapters travel."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
import torch

ray = pytest.importorskip("ray")
transformers = pytest.importorskip("transformers")  # LMPolicy replicas
peft = pytest.importorskip("peft")  # LoRA adapters

from genrl_swarm.core import RewardManager, Rollout, StageInput, Task  # noqa: E402
from genrl_swarm.data.reasoning_gym import ReasoningGymData  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.cluster import connect  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.config import PipelineConfig, RayConfig  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.peer import policy_kwargs  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.pipeline import AsyncPipeline  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.weight_sync import export_state, import_state  # noqa: E402
from genrl_swarm.paradigms.lm.policy import LMPolicy  # noqa: E402

pytestmark = pytest.mark.slow  # a Ray cluster

LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
SAMPLING = {"num_generations": 4, "max_new_tokens": 12}


class Digits(RewardManager):
    """Digits per completion: the tiny model's samples differ on it, so every group trains."""

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        return [sum(c.isdigit() for c in text) / 8 + 0.01 * len(text) for text in rollout.texts]


def test_a_lora_replica_is_rebuilt_from_policy_kwargs_and_only_adapters_travel() -> None:
    learner = LMPolicy("tiny-random", SAMPLING, lora=LORA, seed=0)
    replica = LMPolicy(**policy_kwargs(learner), seed=9)  # a worker: other seed, other initial A matrices
    assert hasattr(replica.model, "peft_config") and replica.lora == learner.lora
    with torch.no_grad():  # "train" the learner's adapters
        for name, p in learner.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)
    state = export_state(learner.model)
    assert state and all("lora_" in name for name in state)
    assert sum(np.asarray(v).size for v in state.values()) < sum(p.numel() for p in learner.model.parameters()) / 10
    ids = torch.tensor([[5, 17, 42, 8, 99, 3]])
    with torch.no_grad():
        want, before = learner.model(input_ids=ids).logits, replica.model(input_ids=ids).logits
        assert not torch.allclose(before, want, atol=1e-3)
        import_state(replica.model, state)
        assert torch.allclose(replica.model(input_ids=ids).logits, want, atol=1e-5)


def test_the_pipeline_trains_lora_adapters_and_workers_load_exactly_them() -> None:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
    connect(RayConfig(num_cpus=2), log_to_driver=False)  # at the product's worker priority
    try:
        data = ReasoningGymData(
            ["basic_arithmetic"], tasks_per_round=2, seed=1, dataset_config={"basic_arithmetic": {"max_terms": 2, "max_digits": 1}}
        )
        cfg = PipelineConfig(num_workers=1, max_staleness=1, batch_groups=2, worker_cpus=1.0, learner_cpus=1.0, timeout=120.0)
        grpo = {"learning_rate": 1e-2, "num_local": -1, "num_external": 0, "micro_batch_size": 4}
        policy = LMPolicy("tiny-random", SAMPLING, lora=LORA, seed=5)
        pipe = AsyncPipeline.start(cfg, policy_kwargs(policy), grpo, data, Digits(), seed=5)
        try:
            pipe.run(updates=2, seconds=240)
            version, published = pipe.weights()
            assert version >= 2 and published is not None
            assert published and all("lora_" in name for name in published)  # adapters only, nothing else travels
            assert any(np.abs(np.asarray(v)).max() > 0 for name, v in published.items() if "lora_B" in name)  # they trained
            result = ray.get(pipe.workers[0].step.remote(pipe.cfg.task_offset + 10_000, version, list(pipe._box)), timeout=120)
            assert result.loaded_version == version
            mine = ray.get(pipe.workers[0].parameters.remote(), timeout=120)
            assert mine.keys() == published.keys()
            assert all(np.array_equal(np.asarray(mine[k]), np.asarray(published[k])) for k in mine)
        finally:
            pipe.shutdown()
    finally:
        ray.shutdown()
