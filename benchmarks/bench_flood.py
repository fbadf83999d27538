"""How far can one flooding peer of four steer the honest bandit learners? (issue 42.3)

Not a fixed list of attacks: a search over flood plans (tests/helpers/flood.py), i.e. which
arms a flooder sends for each context, by payoff rank, how many pulls of each, the probability
it claims for each (log-uniform, or right at the edge of the old consistency check), and the
round it starts flooding in (honest before). Every plan is played by a real peer in the
in-memory swarm running the real loop; only its policy is hostile; each arm plays the same
rounds, "without" is the three honest peers alone.

The search (flood_search.py, shared with bench_flood_grpo.py) screens random plans on a few
seed sets, climbs from the worst ones by mutation, then measures the worst candidates on every
seed set. Reported: how many plans it tried, and
for the worst found the honest peers' final greedy eval (mean payoff of the greedy arm over
every context, 1.0 = always the best arm) with and without it, and the relative drop, mean and
spread over the seed sets.

    OMP_NUM_THREADS=1 python benchmarks/bench_flood.py [--seeds 8] [--screen 60] [--climb 40]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
import flood_search  # noqa: E402
from flood_search import Result, Space, report  # noqa: E402

from genrl_swarm.comm.memory import InMemoryBackend  # noqa: E402
from genrl_swarm.coord.local import LocalCoordinator  # noqa: E402
from genrl_swarm.run.launcher import run_managers  # noqa: E402

from helpers import bandit_swarm  # noqa: E402
from helpers.bandit_swarm import NUM_ARMS, NUM_GENERATIONS, ROUNDS  # noqa: E402
from helpers.flood import FloodPlan, FloodPolicy, consistency_floor, mutate, random_plan  # noqa: E402

#: Plans every search starts from: the issue's attacks (all second-best at -50, at a uniform
#: policy's 1/8, at certainty; several second-best pulls at a modest claim mixed with a worse arm).
KNOWN = (
    FloodPlan(((1, 2e-22),) * 4),
    FloodPlan(((1, 1 / 8),) * 4),
    FloodPlan(((1, 1.0),) * 4),
    FloodPlan(((1, consistency_floor(4, 4) * 1.01),) * 4),
    FloodPlan(((1, 0.5),) * 3 + ((3, 0.3),)),
    FloodPlan(((1, consistency_floor(3, 4) * 1.01),) * 3 + ((5, 0.2),)),
)


def honest_evals(seed: int, plan: FloodPlan | None, rounds: int = ROUNDS) -> list[float]:
    """The honest peers' final eval after ``rounds`` rounds, with a flooder playing ``plan`` as
    the fourth peer, or the three alone (``plan`` None)."""
    if plan is None:
        return list(bandit_swarm.alone(seed, rounds=rounds))
    coordinator, managers = LocalCoordinator(settle_wait=0), []
    for rank, comm in enumerate(InMemoryBackend.spawn(4)):
        flooder = FloodPolicy(bandit_swarm.data(seed).payoffs, plan, **bandit_swarm.policy_kwargs(seed, rank)) if rank == 3 else None
        managers.append(bandit_swarm.manager(comm, coordinator, seed, rank, rounds, policy=flooder))
    run_managers(managers, keep_results=False)
    return [m.evaluate()["eval/reward"] for m in managers[:3]]


def mean_eval(seed: int, plan: FloodPlan | None) -> float:
    return statistics.mean(honest_evals(seed, plan))


def shape(plan: FloodPlan) -> tuple[object, ...]:
    return tuple(sorted(rank for rank, _ in plan.pulls)), plan.honest_until


SPACE = Space(KNOWN, lambda rng: random_plan(rng, NUM_ARMS, NUM_GENERATIONS, ROUNDS), lambda plan, rng: mutate(plan, rng, NUM_ARMS, ROUNDS), shape)


def search(seeds: int, screen: int, climb: int, rng: random.Random) -> Result[FloodPlan]:
    """The worst plans found (flood_search), with the honest eval on every seed set."""
    return flood_search.search(SPACE, mean_eval, seeds, screen, climb, rng)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=8, help="seed sets for the baseline and the finalists")
    p.add_argument("--screen", type=int, default=60, help="random plans screened on 4 seed sets")
    p.add_argument("--climb", type=int, default=40, help="mutations of the worst plans so far")
    p.add_argument("--search-seed", type=int, default=0)
    args = p.parse_args()
    start = time.monotonic()
    result = search(args.seeds, args.screen, args.climb, random.Random(args.search_seed))
    print(f"plans tried: {result.tried} ({time.monotonic() - start:.0f} s); seed sets: {args.seeds}")
    print("\n".join(report(result, FloodPlan.describe, args.seeds)))


if __name__ == "__main__":
    main()
