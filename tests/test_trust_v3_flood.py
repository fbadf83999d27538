"""A sender cannot raise its own weight (issue 28, point 4): the attack from the issue, one bandit
peer of four sending the most legal pulls of each context's second-best arm with claimed
log-prob -50, run by real peers in the in-memory swarm. Before: every such pull got the cap
weight 2 and the three honest learners ended near 0.6 (the wrong arm on ~40% of contexts).
Since issue 42.3 no claim enters a step: the bandit's (tests/test_trust_v4_flood.py) nor a swarm
token's in GRPO (weighted min(1, n * the receiver's own probability of it), below)."""

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


def test_grpo_a_swarm_tokens_claim_is_not_read() -> None:
    """The same two completions as tests/test_off_policy.py's, the second claiming a behaviour
    log-prob 5 below the learner's (weight e^5), 0.5 below, or 3 above: from this peer's own
    stale rollout the claim weighs (capped at 2, or masked); from a swarm sender every claim, in
    every mode, gives one gradient, each token weighing min(1, 4 p) by the learner's own p (issue
    42.3; before: 0 when implausible, 1 when capped, e^-3 when claimed above: a claim could still
    lower chosen tokens). The untrained tiny model finds these tokens unlikely (p ~ 1e-4), so they
    weigh far less than the own on-policy tokens of the plain gradient."""
    from test_off_policy import gradient

    reference, expected = gradient("tis", (0.0, 0.0), sender="peer")
    for mode in ("none", "tis", "decoupled"):
        for shift in ((0.0, 5.0), (0.0, 0.5), (0.0, -3.0)):
            swarm, metrics = gradient(mode, shift, sender="peer")
            assert torch.allclose(swarm, reference, rtol=1e-3, atol=1e-12), (mode, shift)
            assert metrics["train/is_weight_mean"] == pytest.approx(expected["train/is_weight_mean"], rel=1e-4)
    assert 0 < expected["train/is_weight_mean"] < 0.01
    plain = gradient("none", (0.0, 5.0))[0]  # own rows: every token weighs 1
    assert not torch.allclose(reference, plain, rtol=1e-3, atol=1e-7)
    own_tis = gradient("tis", (0.0, 0.5))[0]
    assert not torch.allclose(own_tis, plain, rtol=1e-3, atol=1e-7)  # an own claim still weighs: e^0.5
    unbounded, metrics = gradient("tis", (0.0, 5.0), sender="peer", bound=False)  # grpo.swarm_weight_bound: false
    assert torch.allclose(unbounded, plain, rtol=1e-3, atol=1e-7) and metrics["train/is_weight_mean"] == pytest.approx(1.0, abs=1e-4)


def test_grpo_loss_weighs_swarm_tokens_by_the_receivers_probability() -> None:
    """A swarm token weighs min(1, n * p), p this peer's probability of it, n its draws per
    prompt, whatever its claim and the mode; inf draws: 1 (the rule before the bound)."""
    from genrl_swarm.paradigms.lm.grpo_loss import importance_weights

    prox = torch.log(torch.tensor([[1.0, 0.1], [0.5, 0.02]]))
    behaviour = torch.tensor([[-0.5, -50.0], [-0.5, -50.0]])
    swarm = torch.tensor([0.0, 1.0])
    for mode in ("none", "tis", "decoupled"):
        weight, keep = importance_weights(prox, behaviour, mode, 2.0, swarm=swarm, draws=4)
        assert weight[1].tolist() == pytest.approx([1.0, 0.08]) and keep[1].tolist() == [1.0, 1.0], mode
        assert importance_weights(prox, behaviour, mode, 2.0, swarm=swarm, draws=math.inf)[0][1].tolist() == [1.0, 1.0], mode
    weight, keep = importance_weights(prox, behaviour, "tis", 2.0, swarm=swarm, draws=4)
    assert weight[0].tolist() == pytest.approx([math.exp(0.5), 2.0])  # own row: its claims, the is_cap


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
