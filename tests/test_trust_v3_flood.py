"""A sender cannot raise its own weight (issue 28, point 4): the attack from the issue, one bandit
peer of four sending the most legal pulls of each context's second-best arm with claimed
log-prob -50, run by real peers in the in-memory swarm. Before: every such pull got the cap
weight 2 and the three honest learners ended near 0.6 (the wrong arm on ~40% of contexts).
The bandit's claims and repetitions no longer enter its step at all (issue 42.3,
tests/test_trust_v4_flood.py); the GRPO caps below still apply."""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from bench_flood import honest_evals  # noqa: E402

from helpers.flood import FloodPlan  # noqa: E402


@pytest.mark.parametrize("claimed", [-50.0, math.log(1 / 8), 0.0])
def test_the_flooder_no_longer_pulls_honest_learners_to_the_wrong_arm(claimed: float) -> None:
    """-50: the issue's flood (before: 0.59 and 0.62 on these seed sets); log 1/8: a claim as
    likely as a uniform policy's, which no per-sample check can call implausible (0.84 with the
    weight cap alone); 0: claiming certainty."""
    plan = FloodPlan(((1, math.exp(claimed)),) * 4)
    evals = [e for seed in (0, 1) for e in honest_evals(seed, plan)]
    assert statistics.mean(evals) >= 0.9, evals
    assert min(evals) >= 0.75, evals


def test_grpo_a_swarm_token_never_weighs_more_than_an_own_token() -> None:
    """The same two completions as tests/test_off_policy.py's, the second claiming a behaviour
    log-prob 5 below the learner's (weight e^5): from this peer's own stale rollout it gets the
    cap 2; from a swarm sender the claim is implausible (over log 20) and the token weighs 0;
    a plausible claim (0.5 below: weight 1.65) is capped at 1 (before: 2, e^5 capped at 2, and 1.65)."""
    from test_off_policy import gradient

    none = gradient("none", (0.0, 5.0), sender="peer")[0]
    for mode in ("tis", "decoupled"):
        swarm, metrics = gradient(mode, (0.0, 5.0), sender="peer")
        first_only = gradient("decoupled", (0.0, 5.0))[0]  # own: the second masked (over the cap)
        assert torch.allclose(swarm, first_only, rtol=1e-3, atol=1e-7), mode
        assert metrics["train/is_implausible_frac"] == pytest.approx(0.5)
    own_tis = gradient("tis", (0.0, 0.5))[0]
    swarm_tis = gradient("tis", (0.0, 0.5), sender="peer")[0]
    # Linear in the second completion's weight: own e^0.5, swarm 1 = plain (none).
    assert torch.allclose(swarm_tis, gradient("none", (0.0, 0.5), sender="peer")[0], rtol=1e-3, atol=1e-7)
    assert not torch.allclose(own_tis, swarm_tis, rtol=1e-3, atol=1e-7)
    assert not torch.allclose(none, swarm, rtol=1e-3, atol=1e-7)


def test_grpo_loss_caps_swarm_rows_only() -> None:
    from genrl_swarm.paradigms.lm.grpo_loss import PLAUSIBLE_LOG_RATIO as PLAUSIBLE_LOG_RATIO_LM
    from genrl_swarm.paradigms.lm.grpo_loss import importance_weights

    prox = torch.zeros(2, 2)
    behaviour = torch.tensor([[-0.5, -50.0], [-0.5, -50.0]])
    weight, keep = importance_weights(prox, behaviour, "tis", 2.0, swarm=torch.tensor([0.0, 1.0]))
    assert weight[0].tolist() == pytest.approx([math.exp(0.5), 2.0])  # own row: the is_cap
    assert weight[1].tolist() == pytest.approx([1.0, 0.0]) and keep[1].tolist() == [1.0, 0.0]  # swarm: 1, implausible 0
    at_tolerance = torch.full((1, 1), -PLAUSIBLE_LOG_RATIO_LM, dtype=torch.float64)  # exactly the stated tolerance: plausible
    weight, _ = importance_weights(torch.zeros(1, 1, dtype=torch.float64), at_tolerance, "tis", 2.0, swarm=torch.ones(1))
    assert weight.item() == 1.0


def test_grpo_one_sender_fills_at_most_its_cap_of_the_external_share() -> None:
    """A flooder that is the only sender with informative groups used to fill the whole external share."""
    import random

    from genrl_swarm.core import Rollout, ScoredRollout
    from genrl_swarm.paradigms.lm.selection import draw_external

    flood = [ScoredRollout(Rollout("flooder", 0, 0, None), (1.0, 0.0)) for _ in range(8)]  # type: ignore[arg-type]
    honest = [ScoredRollout(Rollout("b", 0, 0, None), (1.0, 0.0))]  # type: ignore[arg-type]
    chosen = draw_external([*flood, *honest], 6, random.Random(0), max_per_sender=2)
    assert sum(c.rollout.peer_id == "flooder" for c in chosen) == 2 and len(chosen) == 3
    assert len(draw_external(flood, 6, random.Random(0))) == 6  # no cap: the turns alone
