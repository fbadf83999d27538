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
- **Step-level credit** (``advantage``: ``episode`` | ``step`` | ``both``). ``step`` and ``both``
  add GiGPO's step groups (``agents.step_advantage``): turns of one task's episodes taken from the
  same environment state are compared by their return-to-go. A turn's advantage then differs
  from its neighbours', so each model turn becomes its own sample (prompt: everything before
  it), which costs one forward pass per turn instead of one per episode.
- **Selection** is GRPOLearner's SAPO draw (``paradigms.lm.selection``): an episode of the swarm
  teaches when its task group has a non-zero advantage among all episodes this peer holds.
Micro-batching, the clipped surrogate, off-policy correction (each model token's behaviour
log-prob is the one of the policy that generated its turn), epochs and the optimizer are
GRPOLearner's own code.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from genrl_swarm.core import GameState, RoundRewards, ScoredRollout, Task
from genrl_swarm.paradigms.agents.bodies import Episode
from genrl_swarm.paradigms.agents.step_advantage import Advantage, anchor_keys, combine, returns_to_go, step_advantages
from genrl_swarm.paradigms.lm.grpo_loss import group_advantages
from genrl_swarm.paradigms.lm.learner import Batch, GRPOConfig, GRPOLearner, Sample
from genrl_swarm.paradigms.lm.policy import LMPolicy
from genrl_swarm.paradigms.lm.selection import sapo_select
from genrl_swarm.paradigms.lm.swarm_value import gains

Normalize = Literal["task", "group", "batch", "none"]


def task_advantages(rewards: Sequence[float], groups: Sequence[Hashable], tasks: Sequence[str], normalize: Normalize = "task") -> list[float]:
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


def turn_samples(episode: Episode, advantages: Sequence[float]) -> list[EpisodeSample]:
    """One sample per model turn: the ids before it are the prompt, its own ids the completion."""
    ids, at, out = episode.token_ids, 0, []
    model_turns = iter(advantages)
    for turn in episode.turns:
        if turn.role == "assistant":
            a = next(model_turns)
            if turn.token_ids:
                out.append(EpisodeSample(ids[:at], list(turn.token_ids), list(turn.logprobs), a, (True,) * len(turn.token_ids)))
        at += len(turn.token_ids)
    return out


def task_of(tasks: Mapping[str, Task], task_id: str) -> tuple[str, Hashable]:
    """(task kind, group) of a task of the round, from this peer's own task record."""
    meta = tasks[task_id].metadata
    return str(meta.get("task", "task")), meta.get("group", task_id)


class AgentLearner(GRPOLearner):
    """GRPOLearner on episodes; ``normalize`` picks the advantage scaling, ``advantage`` whether
    turns also get GiGPO's step term (``step_weight`` times it in ``both``; returns discounted by
    ``step_discount`` per turn), see the module."""

    def __init__(
        self, policy: LMPolicy, grpo: GRPOConfig | Mapping[str, Any] | None = None, normalize: Normalize = "task", seed: int = 0,
        advantage: Advantage | str = Advantage.EPISODE, step_weight: float = 1.0, step_discount: float = 0.95,
    ) -> None:  # fmt: skip
        if normalize not in ("task", "group", "batch", "none"):
            raise ValueError(f"normalize must be task, group, batch or none, got {normalize!r}")
        try:
            self.advantage = Advantage(advantage)
        except ValueError:
            raise ValueError(f"advantage must be episode, step or both, got {advantage!r}") from None
        if not 0.0 < step_discount <= 1.0 or step_weight < 0:
            raise ValueError(f"step_discount must be in (0, 1] and step_weight >= 0, got {step_discount} and {step_weight}")
        super().__init__(policy, grpo, seed)
        self.normalize, self.step_weight, self.step_discount = normalize, step_weight, step_discount

    def select(self, state: GameState, rewards: RoundRewards) -> list[ScoredRollout]:
        """``num_local`` own episodes and ``num_external`` of the swarm's (SAPO), GRPOLearner's draw,
        competing episodes ranked by their gain over this peer's own mean reward for the task
        group (``swarm_value.gains`` keyed by task group): ids cannot multiply it, so Sybil ids sending poor episodes win
        only the turns among equal gains. No closeness term: an episode's opening is not one
        completion of one prompt (its turns interleave tool output)."""
        usable = [s for s in rewards.scored if isinstance(s.rollout.body, Episode) and s.rollout.task_id in state.tasks]
        own = [s for s in usable if s.rollout.peer_id == state.peer_id]
        swarm = [s for s in usable if s.rollout.peer_id != state.peer_id]
        keys = [task_of(state.tasks, s.rollout.task_id)[1] for s in usable]
        useful = {g for g, adv in zip(keys, self.turn_advantages(usable, state.tasks)) if any(abs(a) > 1e-6 for a in adv)}
        teaches = lambda s: task_of(state.tasks, s.rollout.task_id)[1] in useful  # noqa: E731
        group = lambda s: task_of(state.tasks, s.rollout.task_id)[1]  # noqa: E731
        value = lambda episodes: [(g,) for g in gains(episodes, own, key=group)]  # noqa: E731
        return sapo_select(own, swarm, self.cfg.num_local, self.cfg.num_external, self.rng, self.cfg.max_external_per_sender, teaches, value)

    def turn_advantages(self, chosen: Sequence[ScoredRollout], tasks: Mapping[str, Task]) -> list[list[float]]:
        """Each episode's advantage per model turn: its episode term (task groups), its step term
        (states within a task group), or both, as ``advantage`` says."""
        keys = [task_of(tasks, s.rollout.task_id) for s in chosen]
        rewards = [s.mean for s in chosen]
        episode = task_advantages(rewards, [g for _, g in keys], [k for k, _ in keys], self.normalize)
        anchors = [anchor_keys(s.rollout.body.turns) for s in chosen]
        flat_episode = [a for a, turns in zip(episode, anchors) for _ in turns]
        returns = [r for reward, turns in zip(rewards, anchors) for r in returns_to_go(reward, len(turns), self.step_discount)]
        states = [(g, key) for (_, g), turns in zip(keys, anchors) for key in turns]
        step = step_advantages(returns, states, scale=self.normalize != "none") if self.advantage is not Advantage.EPISODE else [0.0] * len(states)
        flat = iter(combine(flat_episode, step, self.advantage, self.step_weight))
        return [[next(flat) for _ in turns] for turns in anchors]

    def samples(self, state: GameState, chosen: Sequence[ScoredRollout]) -> list[Sample]:
        """One sample per episode (``episode``) or per model turn (``step``, ``both``) with its
        advantage; task groups whose advantages are all zero carry no signal and are left out."""
        groups = [task_of(state.tasks, s.rollout.task_id)[1] for s in chosen]
        advantages = self.turn_advantages(chosen, state.tasks)
        useful = {g for g, adv in zip(groups, advantages) if any(abs(a) > 1e-6 for a in adv)}
        out: list[Sample] = []
        for s, g, adv in zip(chosen, groups, advantages):
            if g not in useful or not adv:
                continue
            rows = [episode_sample(s.rollout.body, adv[0])] if self.advantage is Advantage.EPISODE else turn_samples(s.rollout.body, adv)
            swarm = s.rollout.peer_id != state.peer_id  # weighted by this peer's policy
            out.extend(dataclasses.replace(r, swarm=swarm) for r in rows if r is not None)
        return out

    def swarm_draws(self, state: GameState) -> float:
        """A group here is ``group_size`` copies of one task instance, not ``num_generations``
        samples (unused by agents): n in a swarm token's weight min(1, n * p) is the copies of
        one instance this peer plays this round."""
        copies = Counter(task_of(state.tasks, t)[1] for t in state.tasks)
        return float(max(copies.values(), default=1))

    def collate(self, samples: Sequence[Sample]) -> Batch:
        """GRPOLearner's batch, with each episode's mask where it marks a solid completion."""
        batch = super().collate(samples)
        for i, s in enumerate(samples):
            mask = torch.tensor(list(getattr(s, "mask", ())) or [True] * len(s.completion_ids), dtype=batch.completion_mask.dtype)
            batch.completion_mask[i].zero_()
            batch.completion_mask[i, batch.width - len(mask) :] = mask.to(batch.completion_mask.device)
        return batch

    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        return super().train(state, rewards) | task_metrics(state, rewards)


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
