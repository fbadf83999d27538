"""A sender cannot raise its own weight (issue 28, point 4): the attack from the issue, one bandit
peer of four sending the most legal pulls of each context's second-best arm with claimed
log-prob -50, run by real peers in the in-memory swarm. Before: every such pull got the cap
weight 2 and the three honest learners ended near 0.6 (the wrong arm on ~40% of contexts)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

from genrl_swarm.games.bandit.game import PLAUSIBLE_LOG_RATIO, capped_sender_shares, importance_weight

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from bench_flood import honest_evals  # noqa: E402


def test_the_flooder_no_longer_pulls_honest_learners_to_the_wrong_arm() -> None:
    evals = [e for seed in (0, 1) for e in honest_evals(seed, flooder=True, rounds=16)]
    assert statistics.mean(evals) >= 0.9, evals  # before: 0.59 and 0.62 on these seed sets
    assert min(evals) >= 0.75, evals


@pytest.mark.parametrize("claimed", [-50.0, -800.0, -1e9])
def test_a_swarm_pull_never_weighs_more_than_an_own_pull(claimed: float) -> None:
    local = float(__import__("math").log(0.3))
    assert importance_weight(local, claimed, own=False) == 0.0  # implausible: beyond the stated tolerance
    assert importance_weight(local, local - PLAUSIBLE_LOG_RATIO + 1e-9, own=False) == 1.0  # plausible: capped at 1
    assert importance_weight(local, local, own=False) == pytest.approx(1.0)
    assert importance_weight(local, local + 1.0, own=False) < 1.0  # a sender may lower its own weight
    assert importance_weight(local, local - 5.0, own=True) == pytest.approx(2.0)  # own pulls: the old cap


def test_no_other_sender_holds_more_than_its_share_of_an_update() -> None:
    weights = [("me", 1.0)] * 4 + [("flood", 1.0)] * 12 + [("b", 1.0)] * 4
    scales = capped_sender_shares(weights, "me", 0.5)
    assert scales == {"flood": pytest.approx(10 / 12)}  # 12 of 20 -> 10 of 20
    assert capped_sender_shares([("me", 9.0), ("b", 1.0)], "me", 0.5) == {}  # own pulls are never scaled
