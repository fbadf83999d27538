"""The worst-flood search the flood benchmarks share (bench_flood.py: bandit, bench_flood_grpo.py:
GRPO on the tiny model): a random screen, a hill climb, then the finalists on every seed set.

A fixed list of attacks tests what someone thought of; this searches a plan space instead. It
screens the known plans and random ones on a few seed sets by the honest peers' mean relative
drop against the honest peers alone, climbs from one of the three worst so far by mutation, then
measures the three worst of distinct shapes (``space.shape``: so the finalists are different
attacks, not one plan with other claims) on every seed set.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

P = TypeVar("P")


@dataclass(frozen=True)
class Space(Generic[P]):
    """A plan space: plans every search starts from, a random plan, a neighbour, an attack's shape."""

    known: Sequence[P]
    draw: Callable[[random.Random], P]
    mutate: Callable[[P, random.Random], P]
    shape: Callable[[P], Hashable]


@dataclass(frozen=True)
class Found(Generic[P]):
    """A finalist and the honest peers' mean final eval on every seed set with it."""

    plan: P
    evals: list[float]


@dataclass(frozen=True)
class Result(Generic[P]):
    tried: int
    worst: list[Found[P]]  # worst first (lowest mean honest eval)
    base: list[float]  # the honest peers alone, per seed set

    def drops(self, found: Found[P]) -> list[float]:
        return [1 - e / b for e, b in zip(found.evals, self.base)]


def search(
    space: Space[P], honest_eval: Callable[[int, P | None], float], seeds: int, screen: int, climb: int, rng: random.Random,
    screen_seeds: int = 4, finalists: int = 3,
) -> Result[P]:  # fmt: skip
    """``honest_eval(seed set, plan)``: the honest peers' mean final eval with a flooder playing
    ``plan`` (None: the honest peers alone)."""
    base = [honest_eval(s, None) for s in range(seeds)]
    first = range(min(screen_seeds, seeds))
    scored: list[tuple[float, P]] = []

    def score(plan: P) -> None:
        scored.append((statistics.mean(1 - honest_eval(s, plan) / base[s] for s in first), plan))

    for plan in space.known:
        score(plan)
    for _ in range(screen):
        score(space.draw(rng))
    for _ in range(climb):
        score(space.mutate(rng.choice(sorted(scored, key=lambda x: -x[0])[:3])[1], rng))
    chosen: list[P] = []
    for _, plan in sorted(scored, key=lambda x: -x[0]):
        if len(chosen) < finalists and all(space.shape(plan) != space.shape(c) for c in chosen):
            chosen.append(plan)
    full = [Found(plan, [honest_eval(s, plan) for s in range(seeds)]) for plan in chosen]
    return Result(len(scored), sorted(full, key=lambda f: statistics.mean(f.evals)), base)


def report(result: Result[P], describe: Callable[[P], str], seeds: int) -> list[str]:
    """The lines every flood benchmark prints: baseline, then each finalist's eval and drop."""
    lines = [f"without a flooder: honest final eval {statistics.mean(result.base):.3f} ± {statistics.stdev(result.base):.3f}"]
    for rank, found in enumerate(result.worst):
        drops = result.drops(found)
        label = "worst found" if rank == 0 else "runner-up  "
        lines.append(f"{label} {describe(found.plan)}: honest final eval {statistics.mean(found.evals):.3f} ± "
                     f"{statistics.stdev(found.evals):.3f}, relative drop {statistics.mean(drops):+.1%} ± {statistics.stdev(drops):.1%} "
                     f"(per seed set: {', '.join(f'{d:+.1%}' for d in drops)})")  # fmt: skip
    lines.append(f"goal: the worst found at most 10% (mean over {seeds} seed sets)")
    return lines
