"""Random adversary strategies: each behaviour drawn independently, so the search covers single
attacks and their compositions alike."""

from __future__ import annotations

import random

from helpers.adversary.behaviours import Collude, Equivocate, FreshIds, Hide, Late, Replay, Strategy
from helpers.bandit_swarm import NUM_ARMS, NUM_GENERATIONS
from helpers.flood import random_plan

HONEST = 3  # honest peers in a run, beside the one adversary


def _subset(rng: random.Random, items: range, most: int) -> frozenset[int]:
    return frozenset(rng.sample(items, rng.randint(1, min(most, len(items)))))


def random_strategy(rng: random.Random, rounds: int) -> Strategy:
    """One strategy: a flood plan half the time, each transport behaviour about a third of the
    time, a coalition of 1 to 5 accounts (up to 3 is at most half of the voters) a third."""
    maybe = lambda p: rng.random() < p  # noqa: E731
    return Strategy(
        flood=random_plan(rng, NUM_ARMS, NUM_GENERATIONS, rounds) if maybe(0.5) else None,
        equivocate=Equivocate(_subset(rng, range(HONEST), HONEST - 1), _subset(rng, range(rounds), rounds)) if maybe(0.3) else None,
        hide=Hide(_subset(rng, range(HONEST), HONEST), _subset(rng, range(2), 2)) if maybe(0.3) else None,
        late=Late(_subset(rng, range(rounds), 4), maybe(0.5)) if maybe(0.25) else None,
        fresh=FreshIds(rng.randint(1, 4), maybe(0.5)) if maybe(0.25) else None,
        replay=Replay(rng.randint(1, 3), maybe(0.5), maybe(0.3)) if maybe(0.3) else None,
        collude=Collude(rng.randint(1, 5), rng.choice([0.0, -1e6, 0.1]), rng.choice([1e6, 0.5])) if maybe(0.3) else None,
        seed=rng.randrange(1 << 20),
    )
