"""An adversary search, not only attack-by-attack tests (issue 42.5): hostile behaviours composed
against three honest bandit peers, real GameManagers on an in-memory board, with the invariants
checked after every round (tests/helpers/adversary/): no honest peer dropped-and-counted or
quarantined by another honest peer, every round settled, no coalition of at most half lowering
an honest reward, no exception escaping, and with one adversary of four at most 10% of honest
final eval lost. ``benchmarks/bench_adversary.py`` runs the long search; this is its CI size."""

from __future__ import annotations

import logging
import random

import pytest

from genrl_swarm.coord.scores import round_rewards
from genrl_swarm.core.types import Drop, DropKind

from helpers.adversary import invariants
from helpers.adversary.behaviours import Collude, Equivocate, FreshIds, Hide, Late, Replay, Strategy
from helpers.adversary.harness import Outcome, play
from helpers.adversary.strategy import random_strategy
from helpers.flood import FloodPlan, consistency_floor

ROUNDS = 8
EDGE = consistency_floor(3, 4) * 1.01


def played(strategy: Strategy, rounds: int = ROUNDS) -> Outcome:
    quiet, level = logging.getLogger("genrl_swarm"), logging.getLogger("genrl_swarm").level
    quiet.setLevel(logging.CRITICAL)  # drops and quarantines are expected here
    try:
        outcome = play(strategy, rounds)
    finally:
        quiet.setLevel(level)  # the tests after this file read the package's logs
    assert not outcome.violations, "\n".join(map(str, outcome.violations))
    return outcome


@pytest.mark.slow  # a dozen in-memory swarms
@pytest.mark.parametrize(
    "strategy, did, landed",
    [
        (Strategy(equivocate=Equivocate(frozenset({1}), frozenset(range(ROUNDS)))), "second faces", "equivocation"),
        (Strategy(hide=Hide(frozenset({0, 2}), frozenset({0, 1}))), "", "late"),
        (Strategy(late=Late(frozenset({1, 2, 3}), silent=True)), "silent reveals", "late"),
        (Strategy(late=Late(frozenset({4}), silent=False)), "late posts", "late"),
        (Strategy(fresh=FreshIds(3, reveal=True)), "fresh ids", "payload"),
        (Strategy(fresh=FreshIds(2, reveal=False)), "fresh ids", "late"),
        (Strategy(replay=Replay(1, old_run=False, payload=True)), "replayed payloads", "payload"),
        (Strategy(replay=Replay(1, old_run=True, payload=False)), "replayed records", ""),  # out of the window or run: not read
        (Strategy(flood=FloodPlan(((1, EDGE),) * 3 + ((5, 0.27),))), "", ""),
        (Strategy(collude=Collude(3, 0.0, 1e6)), "", ""),  # half of the voters
        (Strategy(collude=Collude(5, -1e6, 1e6)), "", ""),  # a majority: rewards not checked, the rest is
    ],
    ids=["equivocate", "hide", "silent", "late", "fresh-garbage", "fresh-silent", "replay-payload", "replay-records", "flood", "half", "majority"],
)
def test_each_behaviour_is_played_lands_and_breaks_no_invariant(strategy: Strategy, did: str, landed: str) -> None:
    outcome = played(strategy)
    assert not did or outcome.done[did] > 0, outcome.done
    assert not landed or outcome.hostile_drops[landed] > 0, outcome.hostile_drops


@pytest.mark.slow  # 8 random strategies, 16 rounds each
def test_a_ci_sized_random_search_finds_no_violation() -> None:
    rng = random.Random(42)
    outcomes = [played(random_strategy(rng, 16), 16) for _ in range(8)]
    assert all(o.eval_loss <= invariants.MAX_EVAL_LOSS for o in outcomes if o.strategy.collude is None or o.strategy.collude.size == 1)


def test_the_invariants_catch_what_they_guard() -> None:
    """The checks themselves: an honest peer's counted drop and quarantine by another honest
    peer, an unsettled round, a half coalition's lowered reward, a lost tenth of eval."""
    honest = {"a", "b"}
    drops = [Drop("b", 0, None, "refused", DropKind.REFUSED), Drop("b", 1, None, "view", DropKind.VIEW), Drop("x", 0, None, "bad", DropKind.PAYLOAD)]
    assert [v.what.split(" (")[0] for v in invariants.counted_drops(3, "a", drops, honest)] == ["dropped honest b"]
    assert len(invariants.quarantines(3, "a", {"b", "x"}, honest, {})) == 1
    assert invariants.settled(2, "a", False) and not invariants.settled(2, "a", True)
    # 2 honest + 2 colluders scoring the honest 0: the old tie-break (one NEUTRAL vote) gave the
    # honest 0, which the check flags; the rule in force gives 0.5; a majority is not checked.
    half = {"a": {"a": 0.5, "b": 0.5}, "b": {"a": 0.5, "b": 0.5}, "x": {"a": 0.0, "b": 0.0, "x": 0.5}, "y": {"a": 0.0, "b": 0.0, "y": 0.5}}
    assert invariants.honest_rewards(0, half, {"a": 0.0, "b": 0.0}, honest)
    assert not invariants.honest_rewards(0, half, round_rewards(half), honest)
    majority = half | {"z": {"a": -1.0, "b": -1.0}}
    assert not invariants.honest_rewards(0, majority, {"a": -1.0, "b": -1.0}, honest)
    assert invariants.eval_loss([0.8], [1.0]) and not invariants.eval_loss([0.95], [1.0])
