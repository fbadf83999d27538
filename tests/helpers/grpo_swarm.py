"""GRPO peers on the tiny model that the flood benchmark can hurt (benchmarks/bench_flood_grpo.py).

A task the tiny model learns in a few rounds, so that a flood *could* show: the reward of a
completion is its first token's, 1 for the seed set's target digit, 0.5 for its decoy digit (the
"good but not best" answer a flooder can push, as the bandit's second-best arm), 0 for anything
else. The untrained model starts every reply with a digit (each ~5-15%), so both are sampled from
the first round. The eval is exact, not sampled: the expected reward of the first token at the
sampling temperature over held-out prompts, one forward each (no sampling noise between arms).

The swarm is three honest peers and, optionally, a fourth (the flooder; or several, Sybils) on an
in-memory board with a fixed epoch per seed set, so two runs of one seed set draw the same keys:
arms differ only by what the other peers send (common random numbers). Besides the learner as it
is (``now``: a swarm token weighs min(1, n * the receiver's own probability of it), the swarm
copies of one prefix sharing that budget, ``lm/grpo_loss.py``, ``lm/swarm_budget.py``):
``PerCopyLearner`` the rule before the budget (each copy weighing min(1, n * p) by itself),
``ClaimsReadLearner`` is the control arm (the rules before issue 42.3, under which claims and
composition steer), ``EqualWeightLearner`` the rules between issue 42.3 and the bound (claims
unread, every swarm token weighing what an own on-policy token weighs).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal

import msgspec
import torch

from genrl_swarm.comm.epoch import EPOCH_BYTES, Epoch
from genrl_swarm.comm.memory import InMemoryBackend, InMemorySwarm
from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core import (
    DataManager,
    GameConfig,
    GameManager,
    GameState,
    RewardManager,
    Rollout,
    ScoredRollout,
    StageInput,
    Task,
    TokenRollout,
    TokenSample,
)
from genrl_swarm.core.trust import TrustConfig
from genrl_swarm.paradigms.lm.learner import GRPOConfig, GRPOLearner, Sample
from genrl_swarm.paradigms.lm.policy import LMPolicy
from genrl_swarm.run.launcher import run_managers

ROUNDS, TASKS_PER_ROUND, NUM_GENERATIONS, MAX_NEW_TOKENS = 8, 4, 4, 6
DIGITS = tuple(range(18, 28))  # the tiny tokenizer's "0".."9": the untrained model's first tokens
#: Every honest peer trains on all its own groups and every informative swarm group (3 senders x
#: 4 tasks): the flooder's groups are never squeezed out by the fair-share draw.
GRPO = GRPOConfig(learning_rate=2e-3, num_local=-1, num_external=12, micro_batch_size=64)
#: Adapter peers (``use_adapters``): LoRA on the process's shared tiny base, so each peer commits
#: to its adapter and receivers spot-check its bodies (``core.spot_checks``, on by default); the
#: rate where three honest adapter peers learn about as fast as full models at 2e-3.
ADAPTER_LORA = {"r": 8, "alpha": 16, "target_modules": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")}
LORA: dict[str, object] | None = None
#: Bodies per sender and stage each receiver spot-checks (``trust.spot_checks``; adapter peers only).
TRUST = TrustConfig()


def use_adapters(spot_checks: int = TRUST.spot_checks) -> None:
    """Every peer built after this is an adapter peer checking ``spot_checks`` bodies per sender
    and stage (a process-wide switch for the benchmark)."""
    global GRPO, LORA, TRUST
    GRPO, LORA = dataclasses.replace(GRPO, learning_rate=1e-2), ADAPTER_LORA
    TRUST = dataclasses.replace(TRUST, spot_checks=spot_checks)


@dataclass(frozen=True)
class Tokens:
    """The seed set's token roles: target (reward 1), decoy (0.5), a zero-reward digit, a rare
    non-digit token, and EOS."""

    target: int
    decoy: int
    zero: int
    rare: int
    eos: int


def tokens(seed: int) -> Tokens:
    target, decoy, zero = random.Random(f"tokens:{seed}").sample(DIGITS, 3)
    return Tokens(target, decoy, zero, rare=277, eos=2)  # 277: "step"; 2: <|im_end|>


def questions(seed: int) -> tuple[list[str], list[str]]:
    """(training, held-out) prompts: sums of two numbers below 20, split at random."""
    pairs = [(a, b) for a in range(20) for b in range(20)]
    random.Random(f"questions:{seed}").shuffle(pairs)
    text = [f"Calculate {a} + {b}." for a, b in pairs]
    return text[:-32], text[-32:]


class TargetData(DataManager):
    """``TASKS_PER_ROUND`` training prompts a round, shared by every peer (a pure function of
    the seed set and the round)."""

    def __init__(self, seed: int) -> None:
        self.seed, (self.train, self.held_out) = seed, questions(seed)

    def round_tasks(self, round: int) -> list[Task]:
        rng = random.Random(f"round:{self.seed}:{round}")
        return [Task.create(q) for q in rng.sample(self.train, TASKS_PER_ROUND)]


class FirstTokenReward(RewardManager):
    """1 for a completion starting with the target, 0.5 with the decoy, else 0: computed by the
    receiver from the ids it got, so a sender chooses completions, never their rewards."""

    def __init__(self, roles: Tokens) -> None:
        self.roles = roles

    def score(self, task: Task, input: StageInput, rollout: Rollout) -> list[float]:
        return [self.value(s.completion_ids[0]) for s in rollout.body.samples]

    def value(self, token: int) -> float:
        return 1.0 if token == self.roles.target else 0.5 if token == self.roles.decoy else 0.0


class ClaimsReadLearner(GRPOLearner):
    """The control: swarm claims read (the own tokens' truncated weight, capped at ``is_cap``) and
    every group normalised by itself, its repeats included: the rules before issue 42.3."""

    def samples(self, state: GameState, chosen: Sequence[ScoredRollout]) -> list[Sample]:
        return super().samples(dataclasses.replace(state, peer_id=""), chosen)  # no own baseline: each group by itself

    def units(self, samples: Sequence[Sample]) -> list:  # type: ignore[type-arg]
        return super().units([dataclasses.replace(s, swarm=False) for s in samples])


class PerCopyLearner(GRPOLearner):
    """The rule before the edge budget (``lm/swarm_budget.py``): every swarm copy of a token weighs
    min(1, n * p) by itself, so k copies of one prefix (other tails, other ids) weigh k times it."""

    def budget(self, samples: Sequence[Sample]) -> list[Sample]:
        return list(samples)


class EqualWeightLearner(GRPOLearner):
    """The rules before a swarm token's weight was bounded by the receiver's probability of it: its
    claim unread, it weighs what an own on-policy token weighs (1), however unlikely this peer
    finds it (``swarm_draws`` inf: min(1, inf * p) = 1)."""

    def swarm_draws(self, state: GameState) -> float:
        return math.inf


Rules = Literal["now", "per-copy", "control", "equal-weight"]
LEARNERS: dict[str, type[GRPOLearner]] = {
    "now": GRPOLearner, "per-copy": PerCopyLearner, "control": ClaimsReadLearner, "equal-weight": EqualWeightLearner,
}  # fmt: skip


class FixedFlooder(LMPolicy):
    """A flooder that sends the same ``completions`` (token ids) for every task of every round,
    over its honest bodies' prompts: the shape the hostile reviews' plans take."""

    def __init__(self, *args: object, completions: Sequence[Sequence[int]], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.completions = tuple(tuple(c) for c in completions)

    def rollouts(self, inputs: Sequence[StageInput], greedy: bool = False) -> list[TokenRollout]:
        honest = super().rollouts(inputs, greedy)
        if greedy or self.act_seed is None:
            return honest
        samples = tuple(TokenSample(c, (-30.0,) * len(c), "length") for c in self.completions)
        return [msgspec.structs.replace(body, samples=samples) for body in honest]


def policy(seed: int, rank: int, cls: type[LMPolicy] = LMPolicy, **kwargs: object) -> LMPolicy:
    sampling = {"num_generations": NUM_GENERATIONS, "max_new_tokens": MAX_NEW_TOKENS}
    return cls("tiny-random", sampling, seed=1000 * seed + rank, lora=LORA, **kwargs)  # type: ignore[arg-type]


Others = LMPolicy | Sequence[LMPolicy] | None


def run(seed: int, others: Others, rules: Rules = "now") -> list[LMPolicy]:
    """Play ``ROUNDS`` rounds: three honest peers and ``others`` (a fourth peer, several: ranks 3,
    4, ...; none: the three alone); the honest peers' policies after training. Every peer learns
    by ``rules`` (``LEARNERS``)."""
    swarm = InMemorySwarm(epoch=Epoch(hashlib.sha256(b"flood:%d" % seed).digest()[:EPOCH_BYTES]))
    extra = [] if others is None else [others] if isinstance(others, LMPolicy) else list(others)
    coordinator, managers, honest = LocalCoordinator(settle_wait=0), [], []
    learner_cls = LEARNERS[rules]
    for rank in range(3 + len(extra)):
        pol = extra[rank - 3] if rank >= 3 else policy(seed, rank)
        if rank < 3:
            honest.append(pol)
        config = GameConfig(max_rounds=ROUNDS, exchange_timeout=60.0, mode="train")
        managers.append(GameManager(TargetData(seed), FirstTokenReward(tokens(seed)), pol, learner_cls(pol, GRPO, seed=rank),
                                    InMemoryBackend(swarm, f"peer-{rank}"), coordinator, config, trust=TRUST))  # fmt: skip
    run_managers(managers, keep_results=False)
    return honest


@torch.no_grad()
def evaluate(pol: LMPolicy, seed: int) -> float:
    """Expected first-token reward on the held-out prompts at the sampling temperature (prompts
    of one length in one forward: no padding to get wrong)."""
    roles, (_, held_out) = tokens(seed), questions(seed)
    by_length: dict[int, list[list[int]]] = {}
    for q in held_out:
        ids = pol.prompt_ids(Task.create(q).input(0))
        by_length.setdefault(len(ids), []).append(ids)
    total = 0.0
    for rows in by_length.values():
        probs = torch.softmax(pol.model(torch.tensor(rows)).logits[:, -1].float() / pol.sampling.temperature, -1)
        total += float((probs[:, roles.target] + 0.5 * probs[:, roles.decoy]).sum())
    return total / len(held_out)


def honest_eval(seed: int, others: Others, rules: Rules = "now") -> float:
    """The three honest peers' mean final eval."""
    return statistics.mean(evaluate(p, seed) for p in run(seed, others, rules))


@cache
def alone(seed: int, rules: Rules = "now") -> float:
    return honest_eval(seed, None, rules)


@cache
def untrained(seed: int) -> float:
    return evaluate(policy(seed, 0), seed)
