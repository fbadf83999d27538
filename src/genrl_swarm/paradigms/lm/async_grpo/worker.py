"""The rollout worker actor's body: a Policy replica that generates and scores groups.

The driver calls ``step`` with a task draw and the newest published weights; the worker loads
them first if they are newer than its own (between generations, never during one), samples the
draw's tasks, scores them with the game's reward (local truth, as in the synchronous loop) and
returns the groups stamped with the version that sampled them. It keeps nothing the pipeline
needs: if the actor dies, Ray restarts it and only the step in flight is lost."""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ray
import torch

from genrl_swarm.core import ActSeed, DataManager, RewardManager, Rollout, StageInput, TokenRollout
from genrl_swarm.paradigms.lm.async_grpo.buffer import Group
from genrl_swarm.paradigms.lm.async_grpo.weight_sync import State, export_state, fetch, import_state
from genrl_swarm.paradigms.lm.policy import LMPolicy

#: Added to a restarted worker's sampling seed, so it does not replay the draws it made before.
RESTART_SEED = 1_000_003


@dataclass(frozen=True)
class StepResult:
    """One generation: its groups and how long sampling took."""

    worker: int
    draw: int
    groups: tuple[Group, ...]
    generate_seconds: float
    loaded_version: int


class RolloutWorker:
    def __init__(self, index: int, policy_kwargs: Mapping[str, Any], data: DataManager, reward: RewardManager,
                 seed: int, threads: int, timeout: float) -> None:  # fmt: skip
        torch.set_num_threads(max(1, threads))
        with warnings.catch_warnings():  # Ray warns about an internal call of its own here
            warnings.simplefilter("ignore")
            restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        self.index, self.data, self.reward, self.timeout = index, data, reward, timeout
        self.policy = LMPolicy(**policy_kwargs, seed=seed + 7919 * index + (RESTART_SEED if restarted else 0))
        self.restarted = restarted

    def ready(self) -> tuple[int, bool]:
        """(index, restarted): answers once the model is loaded."""
        return self.index, self.restarted

    def nccl_join(self, world_size: int) -> None:
        """Rank 1 + index of the weights' NCCL group (GPUs only; untested here)."""
        from genrl_swarm.paradigms.lm.async_grpo.weight_sync import NcclSync

        self.nccl = NcclSync(world_size, 1 + self.index)

    def nccl_receive(self, version: int) -> int:
        """Take the learner's broadcast (queued after the generation in progress, so between generations)."""
        self.nccl.broadcast(self.policy.model)
        self.policy.version = version
        return version

    def parameters(self) -> State:
        """This replica's trainable tensors (to check weight sync)."""
        return export_state(self.policy.model)

    def _catch_up(self, version: int, box: list[Any]) -> None:
        """Load the published weights ``version`` (in ``box``) unless this replica holds them.
        Not only when behind: a resume republishes the checkpoint's weights, older than a
        replica that ran before it."""
        if version != self.policy.version and box:
            import_state(self.policy.model, fetch(box, self.timeout))
            self.policy.version = version

    def act(self, inputs: list[StageInput], version: int, box: list[Any], seed: ActSeed | None = None) -> list[TokenRollout]:
        """The game's round on this replica: the peer's own inputs, sampled with the newest
        weights and the round's ``seed`` (``lm.seeding``), for the peer to share with the swarm
        (it scores and buffers them itself)."""
        self._catch_up(version, box)
        self.policy.act_seed = seed
        try:
            return self.policy.rollouts(inputs)
        finally:
            self.policy.act_seed = None  # the worker's own draws (``step``) keep its local stream

    def step(self, draw: int, version: int, box: list[Any]) -> StepResult:
        """Generate and score ``data.round_tasks(draw)`` with weights ``version`` (in ``box``)."""
        self._catch_up(version, box)
        start = time.perf_counter()
        tasks = self.data.round_tasks(draw)
        inputs = [t.input(0) for t in tasks]
        bodies = self.policy.rollouts(inputs)
        groups = []
        for task, inp, body in zip(tasks, inputs, bodies):
            texts = self.policy.texts(body)
            rewards = tuple(float(x) for x in self.reward.score(task, inp, Rollout(f"worker-{self.index}", draw, 0, body, texts)))
            groups.append(Group(body, rewards, body.policy_version, f"worker-{self.index}", False, texts))
        return StepResult(self.index, draw, tuple(groups), time.perf_counter() - start, self.policy.version)
