"""A GRPO flood inside every bound, on the tiny model (issue 42; benchmarks/bench_flood_grpo.py).

Claims: a swarm token's claimed log-prob is not read, so the same flood with any claim plays the
same run bit for bit; under the rules before issue 42.3 (the control) the claim changed the run.

Selective reporting: a flooder that sends only good-but-not-best completions (the decoy, worth
0.5) among bad ones, each counted as if the receiver had sampled it, against an own group that
early on is often all zero. A swarm token now weighs min(1, n * the receiver's own probability of
it) (``lm/grpo_loss.py``), which bounds what completions the receiver would rarely draw can do;
under the rule before (every swarm token weighing 1, ``equal-weight``) the same flood cost 59.6%.
The swarm copies of one prefix-and-token edge, every sender's together, share that budget
(``lm/swarm_budget.py``): a decoy sent three times with different tails, which weighed three times
under the bound per copy (the longest search's worst then, 17.2% over 8 seed sets), now weighs
what the receiver's own draws would. And p is the receiver's probability of the whole path up to
the token, not of the token after its prefix: the worst found against the edge budget (one decoy
a task, its tails weighing up to 1 each: 10.9%) costs 2.0% with it.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
import torch  # noqa: E402, F401 - the GRPO swarm (helpers.grpo_swarm, bench_flood_grpo) trains with it

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from bench_flood_grpo import honest_eval  # noqa: E402

from helpers import grpo_swarm  # noqa: E402
from helpers.grpo_flood import Completion, GRPOFloodPlan  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
LONG = grpo_swarm.MAX_NEW_TOKENS


def decoy_among_zeros(claim: float) -> GRPOFloodPlan:
    """The search's runner-up (31.3% ± 23.3% over 8 seed sets): one decoy and three zero-reward
    completions, all at the length cap, on every task."""
    return GRPOFloodPlan((Completion("decoy", "decoy", LONG, claim),) + (Completion("zero", "zero", LONG, claim),) * 3)


def test_no_claimed_log_prob_changes_an_honest_grpo_learner() -> None:
    # Equal up to float summation order (torch's threads: 1.5e-7 apart seen between two runs of one
    # plan); the control, which reads claims, moves the eval by more than a tenth (0.25 vs 0.94).
    now = [honest_eval(0, decoy_among_zeros(claim), rules="now") for claim in (-30.0, 0.0)]
    assert abs(now[0] - now[1]) <= 1e-4, now
    control = [honest_eval(0, decoy_among_zeros(claim), rules="control") for claim in (-30.0, 0.0)]
    assert abs(control[0] - control[1]) > 0.1, control  # the control reads them: the check above could fail


def test_the_decoy_flood_costs_at_most_a_tenth_of_honest_eval() -> None:
    drop = {rules: 1 - honest_eval(0, decoy_among_zeros(-30.0), rules=rules) / grpo_swarm.alone(0, rules) for rules in ("now", "equal-weight")}
    assert drop["now"] <= 0.10, drop  # measured 0.3% on this seed set
    assert drop["equal-weight"] > 0.3, drop  # every swarm token weighing 1 (the rule before): 59.6%


def distinct_decoys() -> GRPOFloodPlan:
    """The longest search's worst against the bound per copy (17.2% ± 13.7% over 8 seed sets):
    three decoy completions with different tails, so none is a repeat that counts once, and one
    zero-reward completion, every task."""
    tails = (Completion("decoy", "zero", LONG, -30.0), Completion("decoy", "zero", 2, -30.0))
    return GRPOFloodPlan(tails + (Completion("zero", "decoy", 1, -30.0), Completion("decoy", "decoy", 1, -30.0)))


@pytest.mark.slow  # 16 GRPO games: 2-3 minutes on 2 loaded cores
def test_distinct_decoys_cost_at_most_a_tenth_of_honest_eval() -> None:
    """The goal as the benchmark states it: the mean relative drop over 8 seed sets (one seed set
    is too noisy for it: per seed set -4.5% to 22.7% now, 1.1% to 36.8% under the bound per copy)."""
    drops = [1 - honest_eval(seed, distinct_decoys(), rules="now") / grpo_swarm.alone(seed) for seed in range(8)]
    assert statistics.mean(drops) <= 0.10, drops  # measured 1.8%; 7.5% under the edge budget, 17.2% with each copy weighing min(1, n p) by itself


def one_decoy_a_task() -> GRPOFloodPlan:
    """The worst found against the edge budget (10.8% ± 8.6% over 8 seed sets, a search aware of
    it): one decoy, a zero-reward digit then decoys, a rare token then the flooder's likeliest
    tokens, every task: no copies to share, and tails each weighing what the receiver's p of a
    token after its prefix gave it; under the path budget 2.0% ± 12.4%."""
    return GRPOFloodPlan((Completion("decoy", "zero", LONG, -30.0), Completion("zero", "decoy", 5, -10.0), Completion("rare", "likely", 5, 0.0)))


@pytest.mark.slow  # 8 more GRPO games (the honest peers alone are cached)
def test_the_worst_flood_found_costs_at_most_a_tenth_of_honest_eval() -> None:
    drops = [1 - honest_eval(seed, one_decoy_a_task(), rules="now") / grpo_swarm.alone(seed) for seed in range(8)]
    assert statistics.mean(drops) <= 0.10, drops  # measured 2.0%; 10.9% under the edge budget (a strict xfail then)
