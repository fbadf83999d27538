"""A GRPO flood inside every bound, on the tiny model (issue 42; benchmarks/bench_flood_grpo.py).

Claims: a swarm token's claimed log-prob is not read, so the same flood with any claim plays the
same run bit for bit; under the rules before issue 42.3 (the control) the claim changed the run.

Selective reporting, the known gap: a flooder that sends only good-but-not-best completions (the
decoy, worth 0.5) among bad ones still costs the honest learners far more than the goal's 10%,
because each swarm completion counts as if the receiver had sampled it, against an own group
that early on is often all zero. Marked xfail(strict) so the fix is noticed when it lands.
"""

from __future__ import annotations

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


@pytest.mark.xfail(strict=True, reason="selective reporting: each swarm completion counts as an own sample (docs/trust.md)")
def test_the_decoy_flood_costs_at_most_a_tenth_of_honest_eval() -> None:
    drop = 1 - honest_eval(0, decoy_among_zeros(-30.0), rules="now") / grpo_swarm.alone(0)
    assert drop <= 0.10, drop  # measured 59.6% on this seed set
