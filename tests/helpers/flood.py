"""A bandit flooder that stays inside every bound a receiver can check, described by a plan
that a search can vary (benchmarks/bench_flood.py, the adversary harness).

The flooder is a real peer with a hostile policy: for each context it sends pulls of arms chosen
by their payoff rank (0 = the best arm, 1 = the second best, ...) with claimed probabilities of
its choosing; it knows the hidden payoff table (the strongest such attacker). Its bodies are
legal: at most ``num_generations`` pulls, claims that are finite log-probs, the input it was
given. ``honest_until`` lets it behave honestly (its own softmax policy, true claims) for some
rounds first, so a search also covers floods that start once the honest learners have settled.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from genrl_swarm.core import Body, StageInput
from genrl_swarm.games.bandit.game import ArmPulls, SoftmaxPolicy


@dataclass(frozen=True)
class FloodPlan:
    """What the flooder sends for each context: ``pulls`` as (payoff rank, claimed probability),
    from round ``honest_until`` on (honest before); in stage 1 the same ranks among the offered
    arms."""

    pulls: tuple[tuple[int, float], ...]
    honest_until: int = 0

    def describe(self) -> str:
        shown = ", ".join(f"rank {rank} @ p={claim:.3g}" for rank, claim in self.pulls)
        return f"[{shown}]" + (f" from round {self.honest_until}" if self.honest_until else "")


def consistency_floor(count: int, pulls: int, bound: float = 1e-3) -> float:
    """The smallest claimed probability under which ``count`` pulls of one arm out of ``pulls``
    still have tail probability >= ``bound``: the edge of the old consistency check, where a
    flooder gets the most weight from a claim."""
    lo, hi = 1e-6, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        tail = sum(math.comb(pulls, j) * mid**j * (1 - mid) ** (pulls - j) for j in range(count, pulls + 1))
        lo, hi = (mid, hi) if tail < bound else (lo, mid)
    return hi


def random_plan(rng: random.Random, num_arms: int, num_generations: int, max_rounds: int) -> FloodPlan:
    """A random legal plan: 1..num_generations pulls of one to three ranks, each claim drawn
    log-uniformly in [0.02, 1] or put at the consistency edge of its count."""
    size = rng.randint(1, num_generations)
    ranks = rng.sample(range(num_arms), rng.randint(1, min(3, size)))
    counts = [1] * len(ranks)
    for _ in range(size - len(ranks)):
        counts[rng.randrange(len(ranks))] += 1
    pulls: list[tuple[int, float]] = []
    for rank, count in zip(ranks, counts):
        edge = rng.random() < 0.4
        claim = consistency_floor(count, size) * 1.01 if edge else math.exp(rng.uniform(math.log(0.02), 0.0))
        pulls += [(rank, min(claim, 1.0))] * count
    honest_until = rng.choice([0, 0, 0, rng.randrange(max_rounds)])
    return FloodPlan(tuple(pulls), honest_until)


def mutate(plan: FloodPlan, rng: random.Random, num_arms: int, max_rounds: int) -> FloodPlan:
    """A neighbour of ``plan``: one pull's rank or claim moved, or the start moved."""
    pulls = list(plan.pulls)
    i = rng.randrange(len(pulls))
    rank, claim = pulls[i]
    choice = rng.random()
    if choice < 0.4:
        pulls = [(r, min(1.0, c * math.exp(rng.gauss(0, 0.5)))) if r == rank else (r, c) for r, c in pulls]
    elif choice < 0.7:
        new = rng.randrange(num_arms)
        pulls = [(new, c) if r == rank else (r, c) for r, c in pulls]
    elif choice < 0.85 and len(pulls) > 1:
        pulls.pop(i)
    else:
        return FloodPlan(tuple(pulls), rng.randrange(max_rounds) if rng.random() < 0.5 else 0)
    return FloodPlan(tuple(pulls), plan.honest_until)


class FloodPolicy(SoftmaxPolicy):
    """Sends ``plan``'s pulls for every context (honest pulls before ``plan.honest_until``)."""

    def __init__(self, payoffs: list[list[float]], plan: FloodPlan, **kwargs: int) -> None:
        super().__init__(**kwargs)
        self.by_rank = [sorted(range(len(row)), key=lambda a: (-row[a], a)) for row in payoffs]
        self.plan = plan

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        if greedy or self.version < self.plan.honest_until:  # its learner bumps the version once a round
            return super().act(inputs, stage, greedy)
        bodies: list[Body] = []
        for inp in inputs:
            ranked = self.by_rank[inp.context["context"]]
            offered = inp.context.get("options")
            pulls = [(ranked[rank], claim) for rank, claim in self.plan.pulls if offered is None or ranked[rank] in offered]
            if not pulls:  # nothing of the plan on offer: any offered arm
                pulls = [(offered[0], 1.0)]
            arms, claims = zip(*pulls)
            bodies.append(ArmPulls(inp.task_id, inp.digest, tuple(arms), tuple(math.log(c) for c in claims), self.version))
        return bodies
