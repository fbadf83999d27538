"""Swarm bandit: the smallest complete game, and the template for writing your own.

Stage 0 ("propose"): for each task (a context of a contextual bandit) a peer samples arms
from its softmax policy. Stage 1 ("pick"): the peer sees the arms the *whole swarm* proposed
for that context and picks one of them. The reward of an arm is its payoff in the task's
hidden payoff row, recomputed locally by every peer. Peers learn by policy gradient with
group-normalised advantages, on their own and (optionally) on the swarm's rollouts: sharing
means more samples per context, so a swarm learns faster than a lone peer.

Copy this file, change the three classes, point a recipe at them: that is a new game.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from genrl_swarm.core import DataManager, GameState, RewardManager, Rollout, RoundRewards, Task, Trainer


def payoff_table(num_contexts: int, num_arms: int, seed: int) -> list[list[float]]:
    """Fixed game: each context has one good arm (payoff 1), one decent arm (0.5), the rest near 0."""
    rng = random.Random(seed)
    table = []
    for _ in range(num_contexts):
        row = [round(rng.uniform(0.0, 0.2), 3) for _ in range(num_arms)]
        best, second = rng.sample(range(num_arms), 2)
        row[best], row[second] = 1.0, 0.5
        table.append(row)
    return table


class BanditData(DataManager):
    """Tasks are contexts; the same (seed, round) gives the same contexts on every peer."""

    def __init__(
        self, num_contexts: int = 16, num_arms: int = 8, tasks_per_round: int = 4, seed: int = 0, game_seed: int = 7
    ) -> None:
        if not 0 < tasks_per_round <= num_contexts:
            raise ValueError("need 0 < tasks_per_round <= num_contexts")
        self.num_contexts, self.tasks_per_round, self.seed = num_contexts, tasks_per_round, seed
        self.payoffs = payoff_table(num_contexts, num_arms, game_seed)

    def _task(self, c: int) -> Task:
        row = self.payoffs[c]
        return Task.create(f"context {c}", answer=str(row.index(max(row))), context=c, payoffs=row)

    def round_tasks(self, round: int) -> list[Task]:
        rng = random.Random(f"{self.seed}/{round}")  # str seeds hash stably across processes
        return [self._task(c) for c in rng.sample(range(self.num_contexts), self.tasks_per_round)]

    def stage_inputs(self, state: GameState, stage: int) -> list[Task]:
        if stage == 0:
            return list(state.tasks.values())
        inputs = []
        for task in state.tasks.values():
            proposed = sorted({int(a) for r in state.select(stage=0, task=task.id) for a in r.completions})
            inputs.append(task.with_prompt(f"{task.prompt} | options {','.join(map(str, proposed))}", options=proposed))
        return inputs

    def eval_tasks(self) -> list[Task]:
        return [self._task(c) for c in range(self.num_contexts)]


def offered_options(prompt: str) -> set[int] | None:
    """Arms a stage-1 prompt offered (None for a stage-0 prompt, where every arm is allowed)."""
    _, sep, tail = prompt.partition("| options ")
    return {int(a) for a in tail.split(",") if a.strip().isdigit()} if sep else None


class BanditReward(RewardManager):
    """Payoff of the chosen arm; 0 for an unparsable arm or one that was not on offer."""

    def score(self, task: Task, rollout: Rollout) -> list[float]:
        payoffs, allowed = task.metadata["payoffs"], offered_options(rollout.prompt)
        rewards = []
        for completion in rollout.completions:
            arm = int(completion) if completion.strip().isdigit() else -1
            ok = 0 <= arm < len(payoffs) and (allowed is None or arm in allowed)
            rewards.append(float(payoffs[arm]) if ok else 0.0)
        return rewards


class SoftmaxPolicyTrainer(Trainer):
    """A table of logits per (stage, context), trained by REINFORCE with group-normalised advantages."""

    def __init__(
        self,
        num_contexts: int = 16,
        num_arms: int = 8,
        num_stages: int = 2,
        num_generations: int = 4,
        lr: float = 0.5,
        use_swarm: bool = True,
        seed: int = 0,
    ) -> None:
        self.num_generations, self.lr, self.use_swarm = num_generations, lr, use_swarm
        self.logits = np.zeros((num_stages, num_contexts, num_arms))
        self.rng = np.random.default_rng(seed)

    def _probs(self, stage: int, task: Task) -> np.ndarray:
        logits = self.logits[stage, task.metadata["context"]].copy()
        options = task.metadata.get("options") if stage > 0 else None
        if options is not None:
            mask = np.full_like(logits, -np.inf)
            mask[list(options)] = 0.0
            logits = logits + mask
        z = np.exp(logits - logits.max())
        return np.asarray(z / z.sum())

    def generate(self, tasks: Sequence[Task], stage: int) -> list[list[str]]:
        outputs = []
        for task in tasks:
            probs = self._probs(stage, task)
            arms = self.rng.choice(len(probs), size=self.num_generations, p=probs)
            outputs.append([str(a) for a in arms])
        return outputs

    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        groups: dict[tuple[int, str], list[tuple[int, float]]] = defaultdict(list)
        for scored in rewards.scored:
            r = scored.rollout
            if r.peer_id != state.peer_id and not self.use_swarm:
                continue
            for completion, reward in zip(r.completions, scored.rewards):
                if completion.isdigit() and int(completion) < self.logits.shape[2]:
                    groups[(r.stage, r.task_id)].append((int(completion), reward))
        samples = 0
        for (stage, task_id), group in groups.items():
            values = np.array([g[1] for g in group])
            task = next((t for t in state.inputs.get(stage, []) if t.id == task_id), None)  # as shown here
            if task is None or values.std() < 1e-8:
                continue  # not shown to this peer, or no signal: every sample scored the same
            probs = self._probs(stage, task)
            grad = np.zeros_like(probs)
            for (arm, _), adv in zip(group, (values - values.mean()) / values.std()):
                if probs[arm] > 0:  # an arm a peer proposed outside this peer's options carries no gradient
                    grad += adv * (np.eye(len(probs))[arm] - probs)
                    samples += 1
            self.logits[stage, task.metadata["context"]] += self.lr * grad / len(group)
        return {"train/samples": float(samples), "train/groups": float(len(groups))}

    def save(self, directory: Path) -> None:
        np.save(directory / "logits.npy", self.logits)
        (directory / "rng.json").write_text(json.dumps(self.rng.bit_generator.state))

    def load(self, directory: Path) -> None:
        self.logits = np.load(directory / "logits.npy")
        self.rng.bit_generator.state = json.loads((directory / "rng.json").read_text())

