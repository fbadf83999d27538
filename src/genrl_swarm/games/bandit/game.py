"""Swarm bandit: the smallest complete game, and the template for a game that is not text.

Stage 0 ("propose"): for each task (a context of a contextual bandit) a peer samples arms
from its softmax policy. Stage 1 ("pick"): the peer is offered the arms the *whole swarm*
proposed for that context and picks among them. The reward of an arm is its payoff in the
task's hidden payoff row, recomputed locally by every peer. Peers learn by policy gradient
with group-normalised advantages on their own and the swarm's pulls, importance-weighted by
the sender's behaviour probabilities.

What crosses the wire is a typed body (``ArmPulls``: arm indices and their log-probs), not
text. The arms on offer in stage 1 are built by each peer from what *it* accepted; a peer's
pick is scored against the offer this peer made, never against one the sender claims.

Copy this file, change the body and the four classes, point a recipe at them: a new game.
"""

from __future__ import annotations

import json
import math
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
    """REINFORCE with group-normalised advantages per (stage, context). A pull is weighted by
    p_local / p_behaviour (``importance_weight``), capped at 2 for this peer's own pulls and at 1
    for the swarm's: the behaviour probability is the sender's claim, so a swarm pull never
    weighs more than an own one, an implausible claim weighs 0, and so do pulls that contradict
    their body's own claims (``consistent_claims``); ``max_sender_share`` bounds each other
    sender's share of the update's total weight (``capped_sender_shares``)."""

    def __init__(self, policy: SoftmaxPolicy, lr: float = 0.5, use_swarm: bool = True, max_sender_share: float = 0.5) -> None:
        if not 0 < max_sender_share <= 1:
            raise ValueError(f"max_sender_share must be in (0, 1], got {max_sender_share!r}")
        self.policy, self.lr, self.use_swarm, self.max_sender_share = policy, lr, use_swarm, max_sender_share

    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        groups: dict[tuple[int, str], list[tuple[str, int, float, float, bool]]] = defaultdict(list)
        for scored in rewards.scored:
            r = scored.rollout
            if self.use_swarm or r.peer_id == state.peer_id:
                credibles = consistent_claims(r.body) if r.peer_id != state.peer_id else (True,) * len(r.body.arms)
                groups[(r.stage, r.task_id)].extend((r.peer_id, *x) for x in zip(r.body.arms, scored.rewards, r.body.logprobs, credibles))
        terms: list[tuple[str, float, np.ndarray, tuple[int, int]]] = []  # sender, weight, direction, (stage, context)
        for (stage, task_id), group in groups.items():
            values = np.array([g[2] for g in group])
            if values.std() < 1e-8:
                continue  # no signal: every sample scored the same
            inp = state.inputs[stage][task_id]  # as this peer built it
            probs = self.policy.probs(inp)
            for (sender, arm, _, behaviour, credible), adv in zip(group, (values - values.mean()) / values.std()):
                if probs[arm] > 0:  # an arm outside this peer's offer carries no gradient
                    w = importance_weight(float(np.log(probs[arm])), behaviour, own=sender == state.peer_id) if credible else 0.0
                    terms.append((sender, w, adv * (np.eye(len(probs))[arm] - probs) / len(group), (stage, inp.context["context"])))
        scales = capped_sender_shares([(t[0], t[1]) for t in terms], state.peer_id, self.max_sender_share)
        for sender, w, direction, cell in terms:
            self.policy.logits[cell] += self.lr * w * scales.get(sender, 1.0) * direction
        self.policy.version += 1
        mean_w = float(np.mean([t[1] for t in terms])) if terms else 1.0
        return {"train/samples": float(len(terms)), "train/groups": float(len(groups)), "train/is_weight_mean": mean_w}

    def weights(self) -> Weights:
        return Weights(self.policy.version, self.policy.logits)

    def save(self, directory: Path) -> None:
        (directory / "learner.json").write_text(json.dumps({"lr": self.lr}))

    def load(self, directory: Path) -> None:
        self.lr = json.loads((directory / "learner.json").read_text())["lr"]


#: Importance-weight caps: own pulls as before (2), the swarm's never above an own pull's 1.
OWN_WEIGHT_CAP, SWARM_WEIGHT_CAP = 2.0, 1.0
#: The stated tolerance of a claimed behaviour log-prob: a swarm pull whose sender claims it was
#: more than 20x less likely under its policy than under this peer's is implausible, and weighs 0
#: (it is not a drop: an honest sender far from this peer's policy may send one now and then).
PLAUSIBLE_LOG_RATIO = float(np.log(20.0))


def importance_weight(local_logp: float, behaviour_logp: float, own: bool) -> float:
    """min(p_local / p_behaviour, cap), in log space (no division by a claimed 0); 0 for a
    swarm pull whose claim is implausible (``PLAUSIBLE_LOG_RATIO``)."""
    log_ratio = local_logp - behaviour_logp
    if not own and log_ratio > PLAUSIBLE_LOG_RATIO:
        return 0.0
    return float(np.exp(min(log_ratio, np.log(OWN_WEIGHT_CAP if own else SWARM_WEIGHT_CAP))))


#: A body's pulls of one arm are not credible when pulling that arm so often is less likely than
#: this under the probability the body claims for it (or when its pulls of one arm claim
#: different probabilities): a sender claiming a low probability to earn a high weight cannot
#: also pull the same arm every time. An honest body falls below it at most 0.1% of the time (weight 0, no drop).
CONSISTENCY_P = 1e-3


def consistent_claims(body: ArmPulls) -> tuple[bool, ...]:
    """Per pull: whether the body's own claims make its count of that arm plausible."""
    counts: dict[int, int] = defaultdict(int)
    claims: dict[int, set[float]] = defaultdict(set)
    for arm, logp in zip(body.arms, body.logprobs):
        counts[arm] += 1
        claims[arm].add(logp)
    n = len(body.arms)
    credible = {}
    for arm, k in counts.items():
        p = float(np.exp(min(claims[arm])))
        tail = sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))  # P(K >= k)
        credible[arm] = len(claims[arm]) == 1 and tail >= CONSISTENCY_P
    return tuple(credible[a] for a in body.arms)


def capped_sender_shares(weights: Sequence[tuple[str, float]], me: str, max_share: float) -> dict[str, float]:
    """A scale per sender so no other sender holds more than ``max_share`` of the update's total
    weight (this peer's own pulls are never scaled: they are what the cap protects)."""
    totals: dict[str, float] = defaultdict(float)
    for sender, w in weights:
        totals[sender] += abs(w)
    whole = sum(totals.values())
    return {s: max_share * whole / t for s, t in totals.items() if s != me and t > max_share * whole}
