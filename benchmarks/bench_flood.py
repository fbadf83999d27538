"""Does one flooding peer of four steer the honest bandit learners? (issue 28, point 4)

The flooder is a real peer in the in-memory swarm running the real loop; only its policy is
hostile: for every context it sends the most pulls the game allows, all of the context's
second-best arm, each claiming behaviour log-prob -50 (so p_local / p_behaviour is huge, and the
learner's importance-weight cap is all that bounds it). Each arm plays the same rounds; "without"
is the three honest peers alone. Reported: the honest peers' final greedy eval (mean payoff of
the greedy arm over every context, 1.0 = always the best arm), mean and spread over seed sets.

    OMP_NUM_THREADS=1 python benchmarks/bench_flood.py [--rounds 16] [--seeds 4] [--claimed-logp -50]

``--claimed-logp -2.08`` (log 1/8: a uniform policy's, a claim no receiver can call implausible)
measures the flood the plausibility check cannot catch: its pulls then weigh at most 1 each.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence

from genrl_swarm.comm.memory import InMemoryBackend
from genrl_swarm.coord.local import LocalCoordinator
from genrl_swarm.core import Body, GameConfig, GameManager, StageInput
from genrl_swarm.games.bandit import BanditData, BanditReward, SoftmaxLearner, SoftmaxPolicy
from genrl_swarm.games.bandit.game import ArmPulls
from genrl_swarm.run.launcher import run_managers

CLAIMED_LOGP = -50.0


class FloodPolicy(SoftmaxPolicy):
    """Sends ``num_generations`` pulls of each context's second-best arm, claiming log-prob -50."""

    def __init__(self, payoffs: list[list[float]], claimed_logp: float = CLAIMED_LOGP, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.second = [sorted(range(len(row)), key=lambda a: row[a])[-2] for row in payoffs]
        self.claimed_logp = claimed_logp

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        return [
            ArmPulls(i.task_id, i.digest, (self.second[i.context["context"]],) * self.num_generations,
                     (self.claimed_logp,) * self.num_generations, self.version)
            for i in inputs
        ]  # fmt: skip


def honest_evals(seed: int, flooder: bool, rounds: int, claimed_logp: float = CLAIMED_LOGP) -> list[float]:
    """The honest peers' final eval after ``rounds`` rounds, with or without the flooder."""
    n = 4 if flooder else 3
    managers, coordinator = [], LocalCoordinator(settle_wait=0)
    for rank, comm in enumerate(InMemoryBackend.spawn(n)):
        data = BanditData(tasks_per_round=6, seed=seed)  # the recipe's
        if flooder and rank == n - 1:
            policy: SoftmaxPolicy = FloodPolicy(data.payoffs, claimed_logp, num_stages=2, seed=1000 * seed + rank)
        else:
            policy = SoftmaxPolicy(num_stages=2, seed=1000 * seed + rank)
        config = GameConfig(num_stages=2, max_rounds=rounds, exchange_timeout=30.0, mode="train_and_evaluate")
        managers.append(GameManager(data, BanditReward(), policy, SoftmaxLearner(policy), comm, coordinator, config))
    run_managers(managers, keep_results=False)
    return [m.evaluate()["eval/reward"] for m in managers[:3]]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=16)  # the recipe's
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--claimed-logp", type=float, default=CLAIMED_LOGP)
    args = p.parse_args()
    rows = {}
    for flooder in (False, True):
        means = [statistics.mean(honest_evals(seed, flooder, args.rounds, args.claimed_logp)) for seed in range(args.seeds)]
        rows[flooder] = means
        label = "with flooder" if flooder else "without"
        print(f"{label:13s} honest final eval {statistics.mean(means):.3f} ± {statistics.stdev(means):.3f}"
              f"  (per seed set: {', '.join(f'{m:.3f}' for m in means)})")  # fmt: skip
    drop = 1 - statistics.mean(rows[True]) / statistics.mean(rows[False])
    print(f"relative drop {drop:+.1%} (target: at most 10%)")


if __name__ == "__main__":
    main()
