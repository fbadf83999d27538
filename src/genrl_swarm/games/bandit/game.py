"""Swarm bandit: the smallest complete game, and the template for a game that is not text.

Stage 0 ("propose"): for each task (a context of a contextual bandit) a peer samples arms
from its softmax policy. Stage 1 ("pick"): the peer is offered the arms the *whole swarm*
proposed for that context and picks among them. The reward of an arm is its payoff in the
task's hidden payoff row, recomputed locally by every peer. Peers learn by policy gradient
over the arms they and the swarm pulled, weighted by their own policy, never by what a sender
claims (``gradient.py``).

What crosses the wire is a typed body (``ArmPulls``: arm indices and their log-probs), not
text. The arms on offer in stage 1 are built by each peer from what *it* accepted; a peer's
pick is scored against the offer this peer made, never against one the sender claims.

Copy this file, change the body and the four classes, point a recipe at them: a new game.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import msgspec
import numpy as np

from genrl_swarm.core import (
    Body,
    DataManager,
    GameState,
    Learner,
    Policy,
    RewardManager,
    Rollout,
    RoundRewards,
    StageInput,
    Task,
    Weights,
)
from genrl_swarm.core.bodies import check_logprobs
from genrl_swarm.games.bandit.gradient import observed, observed_gradient


class ArmPulls(Body, frozen=True, tag="arms"):
    """The arms one peer pulled for one context, with the log-probability of each under the
    policy that pulled it (``policy_version``)."""

    arms: Annotated[tuple[Annotated[int, msgspec.Meta(ge=0, le=1 << 16)], ...], msgspec.Meta(min_length=1, max_length=256)]
    logprobs: Annotated[tuple[float, ...], msgspec.Meta(max_length=256)]
    policy_version: Annotated[int, msgspec.Meta(ge=0)] = 0

    def __post_init__(self) -> None:
        check_logprobs(self.logprobs, self.arms, "arm pulls")

    @property
    def num_samples(self) -> int:
        return len(self.arms)


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

    def __init__(self, num_contexts: int = 16, num_arms: int = 8, tasks_per_round: int = 4, seed: int = 0, game_seed: int = 7) -> None:
        if not 0 < tasks_per_round <= num_contexts:
            raise ValueError(f"need 0 < tasks_per_round <= num_contexts, got {tasks_per_round} and {num_contexts}")
        self.num_contexts, self.tasks_per_round, self.seed = num_contexts, tasks_per_round, seed
        self.payoffs = payoff_table(num_contexts, num_arms, game_seed)

    def _task(self, c: int) -> Task:
        row = self.payoffs[c]  # private: only the reward sees it
        return Task.create(f"context {c}", answer=str(row.index(max(row))), public={"context": c}, payoffs=row)

    def round_tasks(self, round: int) -> list[Task]:
        rng = random.Random(f"{self.seed}/{round}")  # str seeds hash stably across processes
        return [self._task(c) for c in rng.sample(range(self.num_contexts), self.tasks_per_round)]

    def stage_inputs(self, state: GameState, stage: int) -> list[StageInput]:
        if stage == 0:
            return [t.input(0) for t in state.tasks.values()]
        inputs = []
        for task in state.tasks.values():
            proposed = sorted({a for r in state.select(stage=0, task=task.id) for a in r.body.arms})
            inputs.append(task.input(1, f"{task.prompt} | options {','.join(map(str, proposed))}", options=proposed))
        return inputs

    def eval_tasks(self) -> list[Task]:
        return [self._task(c) for c in range(self.num_contexts)]


class BanditReward(RewardManager):
    """Payoff of each pulled arm; 0 for an arm this peer did not offer (stage 1)."""

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        payoffs, offered = task.metadata["payoffs"], input.context.get("options")
        return [float(payoffs[a]) if a < len(payoffs) and (offered is None or a in offered) else 0.0 for a in rollout.body.arms]


class SoftmaxPolicy(Policy):
    """A table of logits per (stage, context); stage 1 masks arms that were not offered."""

    body_type = ArmPulls

    def __init__(self, num_contexts: int = 16, num_arms: int = 8, num_stages: int = 2, num_generations: int = 4, seed: int = 0) -> None:
        if min(num_contexts, num_arms, num_stages, num_generations) < 1:
            raise ValueError("num_contexts, num_arms, num_stages and num_generations must be >= 1")
        self.num_generations = num_generations
        self.logits = np.zeros((num_stages, num_contexts, num_arms))
        self.rng = np.random.default_rng(seed)
        self.version = 0

    def probs(self, input: StageInput) -> np.ndarray:
        logits = self.logits[input.stage, input.context["context"]].copy()
        options = input.context.get("options")
        if options is not None:
            mask = np.full_like(logits, -np.inf)
            mask[[o for o in options if o < len(logits)]] = 0.0
            logits = logits + mask
        z = np.exp(logits - logits.max())
        return np.asarray(z / z.sum())

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        bodies: list[Body] = []
        for inp in inputs:
            p = self.probs(inp)
            arms = [int(p.argmax())] if greedy else self.rng.choice(len(p), size=self.num_generations, p=p).tolist()
            logps = tuple(float(np.log(max(p[a], 1e-300))) for a in arms)
            bodies.append(ArmPulls(inp.task_id, inp.digest, tuple(arms), logps, self.version))
        return bodies

    def check(self, body: Body, input: StageInput) -> str | None:
        assert isinstance(body, ArmPulls)
        bad = [a for a in body.arms if a >= self.logits.shape[2]]
        if bad:
            return f"arms {bad[:4]} out of range (this game has {self.logits.shape[2]})"
        if len(body.arms) > self.num_generations:
            return f"{len(body.arms)} pulls, this game draws {self.num_generations}"
        return None

    def texts(self, body: Body) -> tuple[str, ...]:
        assert isinstance(body, ArmPulls)
        return tuple(f"arm {a}" for a in body.arms)

    def load_weights(self, weights: Weights) -> None:
        if weights.state is not self.logits:
            self.logits = np.array(weights.state, dtype=float)
        self.version = weights.version

    def save(self, directory: Path) -> None:
        np.save(directory / "logits.npy", self.logits)
        (directory / "policy.json").write_text(json.dumps({"rng": self.rng.bit_generator.state, "version": self.version}))

    def load(self, directory: Path) -> None:
        self.logits = np.load(directory / "logits.npy")
        saved = json.loads((directory / "policy.json").read_text())
        self.rng.bit_generator.state, self.version = saved["rng"], saved["version"]


class SoftmaxLearner(Learner):
    """Policy gradient per (stage, context) over the arms this peer and (``use_swarm``) the swarm
    pulled this round, each weighted by this peer's own policy (``gradient.observed_gradient``):
    a body tells this peer which arms were pulled, whose rewards it computes itself; nothing a
    sender claims (log-probs) or repeats enters the step."""

    def __init__(self, policy: SoftmaxPolicy, lr: float = 0.5, use_swarm: bool = True) -> None:
        self.policy, self.lr, self.use_swarm = policy, lr, use_swarm

    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        groups: dict[tuple[int, str], list[tuple[int, float]]] = defaultdict(list)
        for scored in rewards.scored:
            r = scored.rollout
            if self.use_swarm or r.peer_id == state.peer_id:
                groups[(r.stage, r.task_id)].extend(zip(r.body.arms, scored.rewards))
        steps = 0
        for (stage, task_id), pulls in groups.items():
            inp = state.inputs[stage][task_id]  # as this peer built it: its own offer in stage 1
            gradient = observed_gradient(self.policy.probs(inp), observed(pulls))
            if gradient is not None:
                self.policy.logits[stage, inp.context["context"]] += self.lr * gradient
                steps += 1
        self.policy.version += 1
        return {"train/groups": float(len(groups)), "train/steps": float(steps)}

    def weights(self) -> Weights:
        return Weights(self.policy.version, self.policy.logits)

    def save(self, directory: Path) -> None:
        (directory / "learner.json").write_text(json.dumps({"lr": self.lr}))

    def load(self, directory: Path) -> None:
        self.lr = json.loads((directory / "learner.json").read_text())["lr"]
