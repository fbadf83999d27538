"""Bandit peers as the trust benchmarks and the adversary harness build them: the recipe's game
(16 contexts, 8 arms, 6 tasks a round, 4 pulls, 2 stages), each peer seeded by (seed set, rank)."""

from __future__ import annotations

import statistics
from functools import cache

from genrl_swarm.comm import InMemoryBackend
from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core import Communication, Coordinator, GameConfig, GameManager
from genrl_swarm.games.bandit import BanditData, BanditReward, SoftmaxLearner, SoftmaxPolicy
from genrl_swarm.run.launcher import run_managers

ROUNDS, NUM_ARMS, NUM_GENERATIONS, STAGES = 16, 8, 4, 2


def policy_kwargs(seed: int, rank: int) -> dict[str, int]:
    return {"num_stages": STAGES, "num_generations": NUM_GENERATIONS, "seed": 1000 * seed + rank}


def data(seed: int) -> BanditData:
    return BanditData(tasks_per_round=6, seed=seed)


def manager(
    comm: Communication,
    coordinator: Coordinator,
    seed: int,
    rank: int,
    rounds: int = ROUNDS,
    timeout: float = 30.0,
    policy: SoftmaxPolicy | None = None,
) -> GameManager:
    """A bandit peer; ``policy`` replaces the honest one (a hostile peer's)."""
    policy = policy or SoftmaxPolicy(**policy_kwargs(seed, rank))
    config = GameConfig(num_stages=STAGES, max_rounds=rounds, exchange_timeout=timeout, mode="train_and_evaluate")
    return GameManager(data(seed), BanditReward(), policy, SoftmaxLearner(policy), comm, coordinator, config)


@cache
def alone(seed: int, peers: int = 3, rounds: int = ROUNDS) -> tuple[float, ...]:
    """The final greedy eval of ``peers`` honest peers playing alone (1.0 = the best arm everywhere)."""
    coordinator = LocalCoordinator(settle_wait=0)
    managers = [manager(comm, coordinator, seed, rank, rounds) for rank, comm in enumerate(InMemoryBackend.spawn(peers))]
    run_managers(managers, keep_results=False)
    return tuple(m.evaluate()["eval/reward"] for m in managers)


def mean_alone(seed: int, rounds: int = ROUNDS) -> float:
    return statistics.mean(alone(seed, rounds=rounds))
