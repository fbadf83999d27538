"""The learner actor's body: trains on buffered groups and publishes versioned weights.

It is the only holder of the optimizer state; the driver sends it a batch when one is ready
and asks for the new weights after each update. It measures its own idle time (between the
end of one update and the start of the next), the number the benchmark reports."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from genrl_swarm.paradigms.lm.async_grpo.buffer import Group
from genrl_swarm.paradigms.lm.async_grpo.trainer import WeightedGRPOLearner, train_groups
from genrl_swarm.paradigms.lm.async_grpo.weight_sync import State, export_state
from genrl_swarm.paradigms.lm.policy import LMPolicy


class LearnerActor:
    def __init__(self, policy_kwargs: Mapping[str, Any], grpo: Mapping[str, Any], seed: int, threads: int,
                 trainable_only: bool = True) -> None:  # fmt: skip
        torch.set_num_threads(max(1, threads))
        self.policy = LMPolicy(**policy_kwargs, seed=seed)
        self.learner = WeightedGRPOLearner(self.policy, grpo, seed)
        self.trainable_only = trainable_only
        self.idle_seconds, self.busy_seconds = 0.0, 0.0
        self._idle_from: float | None = None  # the clock starts at the first batch (model load is not idling)

    def version(self) -> int:
        return self.learner.version

    def train(self, groups: Sequence[Group], weights: Sequence[float]) -> dict[str, float]:
        start = time.perf_counter()
        if self._idle_from is not None:
            self.idle_seconds += start - self._idle_from
        metrics = train_groups(self.learner, groups, weights)
        self.policy.version = self.learner.version
        end = time.perf_counter()
        self.busy_seconds += end - start
        self._idle_from = end
        return metrics | {"async/version": float(self.learner.version), "time/train": end - start}

    def state(self) -> State:
        """The tensors to publish (the driver knows their version); returned through the object store."""
        return export_state(self.policy.model, self.trainable_only)

    def nccl_join(self, world_size: int) -> None:
        """Rank 0 of the weights' NCCL group (GPUs only; untested here)."""
        from genrl_swarm.paradigms.lm.async_grpo.weight_sync import NcclSync

        self.nccl = NcclSync(world_size, 0)

    def nccl_send(self) -> int:
        self.nccl.broadcast(self.policy.model, self.trainable_only)
        return self.learner.version

    def times(self) -> tuple[float, float]:
        """(idle, busy) seconds since the first batch."""
        return self.idle_seconds, self.busy_seconds

    def save(self, directory: str) -> None:
        path = Path(directory)
        self.policy.save(path / "policy")
        self.learner.save(path / "learner")

    def load(self, directory: str) -> int:
        path = Path(directory)
        self.policy.load(path / "policy")
        self.learner.load(path / "learner")
        self.policy.version = self.learner.version
        return self.learner.version
