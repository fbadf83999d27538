"""A GRPO flooder on the tiny model that stays inside every bound a receiver checks, described by a
plan a search can vary (benchmarks/bench_flood_grpo.py); the game is tests/helpers/grpo_swarm.py.

The flooder is a real peer whose policy replaces its sampled completions with chosen ones: for
each flooded task, 1 to ``num_generations`` completions, each by the *role* of its first token
(the target, the decoy, a zero-reward digit, a rare token), the role of the tokens after it, its
length (1 to ``max_new_tokens``; shorter than the cap ends with EOS, as a sampler's would) and the
log-prob it claims for every token (anything finite <= 0). The role ``likely`` is aware of the
receiver's bound (a swarm token weighs min(1, n * the receiver's probability of it)): the token its
own policy, which learns alongside the receivers', finds most likely after the completion so far,
the target and EOS left out (as a first token: the likeliest wrong answer), so that what it sends
weighs what an own sample would. Equal completions in one body are
duplicates; the plan also picks the share of the round's tasks it floods (the rest answered
honestly) and the round it starts in. It knows the reward table (the strongest such attacker).
What a receiver checks and it respects: the prompt ids, the tokenizer, the vocabulary, at most
``num_generations`` samples of at most ``max_new_tokens`` tokens, finite log-probs <= 0.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import msgspec
import torch

from genrl_swarm.core import StageInput, TokenRollout, TokenSample
from genrl_swarm.paradigms.lm.policy import LMPolicy

from helpers.grpo_swarm import MAX_NEW_TOKENS, NUM_GENERATIONS, ROUNDS, Tokens

Role = Literal["target", "decoy", "zero", "rare", "likely"]
ROLES: tuple[Role, ...] = ("target", "decoy", "zero", "rare")
#: The plan space of a search aware of the receiver's bound (``--aware`` in bench_flood_grpo.py).
AWARE_ROLES: tuple[Role, ...] = (*ROLES, "likely")
SHARES = (0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Completion:
    """One sent completion: its first token's role, the role of the rest, length, claimed log-prob."""

    first: Role
    filler: Role
    length: int
    claim: float

    def ids(self, roles: Tokens, likely: Callable[[Sequence[int]], int]) -> tuple[int, ...]:
        """The completion's ids; ``likely(so_far)``: the flooder's most likely next token other
        than the target and EOS."""
        body: list[int] = []
        for i in range(self.length):
            role = self.first if i == 0 else self.filler
            body.append(likely(body) if role == "likely" else getattr(roles, role))
        if 1 < self.length < MAX_NEW_TOKENS:
            body[-1] = roles.eos
        return tuple(body)


@dataclass(frozen=True)
class GRPOFloodPlan:
    """What the flooder sends for each flooded task from round ``honest_until`` on."""

    completions: tuple[Completion, ...]
    share: float = 1.0
    honest_until: int = 0

    def describe(self) -> str:
        counts: dict[Completion, int] = {}
        for c in self.completions:
            counts[c] = counts.get(c, 0) + 1
        shown = ", ".join(f"{n} x {c.first}+{c.filler}[{c.length}] @ {c.claim:.3g}" for c, n in counts.items())
        return f"[{shown}] on {self.share:.0%} of tasks" + (f" from round {self.honest_until}" if self.honest_until else "")


def random_claim(rng: random.Random) -> float:
    """0 (certainty) a fifth of the time, else -exp(u) with u uniform: from -0.001 to -30."""
    return 0.0 if rng.random() < 0.2 else -math.exp(rng.uniform(math.log(1e-3), math.log(30.0)))


def random_completion(rng: random.Random, roles: Sequence[Role] = ROLES) -> Completion:
    length = rng.choice([1, 2, MAX_NEW_TOKENS, MAX_NEW_TOKENS, rng.randint(1, MAX_NEW_TOKENS)])
    return Completion(rng.choice(roles), rng.choice(roles), length, random_claim(rng))


def random_plan(rng: random.Random, roles: Sequence[Role] = ROLES) -> GRPOFloodPlan:
    """1..num_generations completions of one to three kinds (the rest duplicates)."""
    size = rng.randint(1, NUM_GENERATIONS)
    kinds = [random_completion(rng, roles) for _ in range(rng.randint(1, min(3, size)))]
    completions = kinds + [rng.choice(kinds) for _ in range(size - len(kinds))]
    honest_until = rng.choice([0, 0, 0, rng.randrange(ROUNDS)])
    return GRPOFloodPlan(tuple(completions), rng.choice(SHARES), honest_until)


def mutate(plan: GRPOFloodPlan, rng: random.Random, roles: Sequence[Role] = ROLES) -> GRPOFloodPlan:
    """A neighbour: one completion's role, filler, length or claim moved; one added (a new kind
    or a duplicate) or dropped; or the share or the start moved."""
    items = list(plan.completions)
    i, choice = rng.randrange(len(items)), rng.random()
    c = items[i]
    if choice < 0.15:
        items[i] = replace(c, first=rng.choice(roles))
    elif choice < 0.25:
        items[i] = replace(c, filler=rng.choice(roles))
    elif choice < 0.4:
        items[i] = replace(c, length=rng.randint(1, MAX_NEW_TOKENS))
    elif choice < 0.55:
        items[i] = replace(c, claim=min(0.0, c.claim * math.exp(rng.gauss(0, 1.0))) if rng.random() < 0.7 else random_claim(rng))
    elif choice < 0.7 and len(items) < NUM_GENERATIONS:
        items.append(rng.choice(items) if rng.random() < 0.5 else random_completion(rng, roles))
    elif choice < 0.8 and len(items) > 1:
        items.pop(i)
    elif choice < 0.9:
        return replace(plan, share=rng.choice(SHARES))
    else:
        return replace(plan, honest_until=rng.randrange(ROUNDS) if rng.random() < 0.5 else 0)
    return replace(plan, completions=tuple(items))


def shape(plan: GRPOFloodPlan) -> tuple[object, ...]:
    """What makes two plans different attacks (not just other claims or lengths)."""
    return tuple(sorted(c.first for c in plan.completions)), plan.share, plan.honest_until > 0


class GRPOFloodPolicy(LMPolicy):
    """Sends ``plan``'s completions for its share of each round's tasks (honest ones before
    ``plan.honest_until``, and for the other tasks)."""

    def __init__(self, *args: Any, roles: Tokens, plan: GRPOFloodPlan, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.roles, self.plan = roles, plan

    def rollouts(self, inputs: Sequence[StageInput], greedy: bool = False) -> list[TokenRollout]:
        honest = super().rollouts(inputs, greedy)
        if greedy or self.act_seed is None or self.act_seed.round < self.plan.honest_until:
            return honest
        order = sorted(range(len(inputs)), key=lambda i: inputs[i].task_id)
        flooded = set(order[: math.ceil(self.plan.share * len(inputs))])
        return [self.flood(body) if i in flooded else body for i, body in enumerate(honest)]

    @torch.no_grad()
    def likely(self, prompt: Sequence[int], so_far: Sequence[int]) -> int:
        """This policy's most likely next token after ``so_far``, other than the target and EOS."""
        logits = self.model(torch.tensor([[*prompt, *so_far]])).logits[0, -1].float()
        logits[[self.roles.target, self.roles.eos]] = -math.inf
        return int(logits.argmax())

    def flood(self, body: TokenRollout) -> TokenRollout:
        samples = []
        likely = functools.partial(self.likely, body.prompt_ids)
        for c in self.plan.completions:
            ids = c.ids(self.roles, likely)
            stopped = ids[-1] == self.roles.eos and len(ids) > 1
            samples.append(TokenSample(ids, (c.claim,) * len(ids), "stop" if stopped else "length"))
        return msgspec.structs.replace(body, samples=tuple(samples))
