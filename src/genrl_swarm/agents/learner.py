"""AgentLearner: multi-turn GRPO on Episode bodies, built from GRPOLearner's pieces.

What differs from single-turn GRPO, and nothing else:
- **The loss mask has holes.** An episode is one sequence (prompt, model turn, tool result,
  model turn, ...); the learner's forward pass covers it all, but only the model's tokens
  (``Episode.loss_mask``: its EOS / turn-end tokens included, the environment's never) carry
  loss. ``collate`` writes that mask where GRPOLearner would mark one solid completion.
- **Groups are per task.** A group is every episode of one task instance (task kind and seed:
  the game's ``group``), whichever copy or peer played it; each is centred on its group mean.
- **Per-task normalisation.** In a mix of tasks, rewards of one kind can be far noisier than
  another's; dividing every advantage by the std of its own task kind's rewards this round
  keeps each task's share of the gradient from depending on that (``normalize="task"``).
  ``group``/``batch``/``none`` are GRPOLearner's scalings, over the same groups.
Micro-batching, the clipped surrogate, off-policy correction (each model token's behaviour
log-prob is the one of the policy that generated its turn), epochs and the optimizer are
GRPOLearner's own code.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from genrl_swarm.core import Episode, GameState, RoundRewards, ScoredRollout, Task
from genrl_swarm.lm.policy import LMPolicy
from genrl_swarm.trainers.grpo import Batch, GRPOConfig, GRPOLearner, Sample
from genrl_swarm.trainers.grpo_loss import group_advantages

Normalize = Literal["task", "group", "batch", "none"]


def task_advantages(
    rewards: Sequence[float], groups: Sequence[Hashable], tasks: Sequence[str], normalize: Normalize = "task"
) -> list[float]:
    """Advantage of each episode: its reward minus its group's mean, divided by the std of the
    rewards of its task kind (``task``), of its group (``group``), of all (``batch``), or 1.

    ``groups[i]`` is episode i's group, ``tasks[i]`` its task kind (one kind per group)."""
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    kind = {g: tasks[idx[0]] for g, idx in members.items()}
    if normalize == "task":
        parts = [[g for g in members if kind[g] == k] for k in sorted(set(kind.values()))]
    else:
        parts = [list(members)]
    out = [0.0] * len(rewards)
    for part in parts:
        scaled = group_advantages([torch.tensor([rewards[i] for i in members[g]], dtype=torch.float64) for g in part],
                                  "batch" if normalize == "task" else normalize)  # fmt: skip
        for g, adv in zip(part, scaled):
            for i, a in zip(members[g], adv.tolist()):
                out[i] = float(a)
    return out


@dataclass
class EpisodeSample(Sample):
    """An episode as GRPOLearner trains on it: ``prompt_ids`` up to the model's first token,
    ``completion_ids`` the rest, ``mask`` 1 on the model's tokens of the rest."""

    mask: Sequence[bool] = ()


def episode_sample(episode: Episode, advantage: float) -> EpisodeSample | None:
    """None for an episode without a model token."""
    mask = episode.loss_mask
    if not any(mask):
        return None
    start = mask.index(True)
    ids, logprobs = episode.token_ids, episode.logprobs
    return EpisodeSample(ids[:start], ids[start:], logprobs[start:], advantage, mask[start:])


def task_of(tasks: Mapping[str, Task], task_id: str) -> tuple[str, Hashable]:
    """(task kind, group) of a task of the round, from this peer's own task record."""
    meta = tasks[task_id].metadata
    return str(meta.get("task", "task")), meta.get("group", task_id)


class AgentLearner(GRPOLearner):
    """GRPOLearner on episodes; ``normalize`` picks the advantage scaling (see the module)."""

    def __init__(self, policy: LMPolicy, grpo: GRPOConfig | Mapping[str, Any] | None = None, normalize: Normalize = "task", seed: int = 0) -> None:
        if normalize not in ("task", "group", "batch", "none"):
            raise ValueError(f"normalize must be task, group, batch or none, got {normalize!r}")
        super().__init__(policy, grpo, seed)
        self.normalize = normalize
        self._tasks: Mapping[str, Task] = {}

    def select(self, state: GameState, rewards: RoundRewards) -> list[ScoredRollout]:
        """``num_local`` own episodes and ``num_external`` of the swarm's (SAPO), as GRPOLearner."""
        usable = [s for s in rewards.scored if isinstance(s.rollout.body, Episode) and s.rollout.task_id in state.tasks]
        own = [s for s in usable if s.rollout.peer_id == state.peer_id]
        swarm = [s for s in usable if s.rollout.peer_id != state.peer_id]
        if 0 <= self.cfg.num_local < len(own):
            own = self.rng.sample(own, self.cfg.num_local)
        return own + self.rng.sample(swarm, min(self.cfg.num_external, len(swarm)))

    def samples(self, chosen: Sequence[ScoredRollout]) -> list[Sample]:
        """One sample per episode with its task-normalised advantage; groups whose episodes all
        scored the same carry no signal and are left out."""
        keys = [task_of(self._tasks, s.rollout.task_id) for s in chosen]
        rewards = [s.mean for s in chosen]
        advantages = task_advantages(rewards, [g for _, g in keys], [k for k, _ in keys], self.normalize)
        spread: dict[Hashable, set[float]] = defaultdict(set)
        for (_, g), r in zip(keys, rewards):
            spread[g].add(r)
        out: list[Sample] = []
        for s, (_, g), a in zip(chosen, keys, advantages):
            sample = episode_sample(s.rollout.body, a) if len(spread[g]) > 1 else None
            if sample is not None:
                out.append(sample)
        return out

    def collate(self, samples: Sequence[Sample]) -> Batch:
        """GRPOLearner's batch, with each episode's mask where it marks a solid completion."""
        batch = super().collate(samples)
        for i, s in enumerate(samples):
            mask = torch.tensor(list(getattr(s, "mask", ())) or [True] * len(s.completion_ids), dtype=batch.completion_mask.dtype)
            batch.completion_mask[i].zero_()
            batch.completion_mask[i, batch.width - len(mask) :] = mask.to(batch.completion_mask.device)
        return batch

    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        self._tasks = state.tasks
        try:
            metrics = super().train(state, rewards)
        finally:
            self._tasks = {}
        return metrics | task_metrics(state, rewards)


def task_metrics(state: GameState, rewards: RoundRewards) -> dict[str, float]:
    """This peer's mean reward and model turns per task kind this round (``agent/<kind>/...``)."""
    by_kind: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for s in rewards.select(peer=state.peer_id):
        if isinstance(s.rollout.body, Episode) and s.rollout.task_id in state.tasks:
            turns = sum(t.role == "assistant" for t in s.rollout.body.turns)
            by_kind[task_of(state.tasks, s.rollout.task_id)[0]].append((s.mean, turns))
    out = {}
    for kind, rows in sorted(by_kind.items()):
        out[f"agent/{kind}/reward"] = sum(r for r, _ in rows) / len(rows)
        out[f"agent/{kind}/turns"] = sum(t for _, t in rows) / len(rows)
    return out
