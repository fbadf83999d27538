"""Unit checks of the protocol core's edges: budgets met exactly, phases with nothing to wait for,
draws when most of the view is unusable, the offender window, catch-up and forgetting.

Each test states what a peer would get wrong without it (who it pulls from, which round it
plays, whom it remembers), and each was seen failing against a mutant of ``genrl_swarm.protocol``.
"""

from __future__ import annotations

import numpy as np
import pytest

from genrl_swarm.core.trust import LATE_WINDOW, SenderBook, TrustConfig
from genrl_swarm.core.types import Drop
from genrl_swarm.protocol import (
    LiveView,
    Verdict,
    alive,
    attested_round,
    classify,
    collect,
    drops_of,
    first_committers,
    forget_after,
    make_strategy,
    offenders,
)

PEERS = [f"peer-{i:02d}" for i in range(12)]


# --- checks ------------------------------------------------------------------------------------


def test_a_commitment_of_exactly_the_budget_passes() -> None:
    """``trust.max_bytes`` is the largest size allowed: a sender at the limit is not quarantined."""
    ones = np.ones(2, dtype=bool)
    v = classify(ones, np.array([50, 51], dtype=np.int64), 50, ones, ones)
    assert [Verdict(x) for x in v] == [Verdict.OK, Verdict.OVER_BUDGET]
    assert v.dtype == np.int8  # one byte per (receiver, sender) pair, as annotated: 10^5 pairs per call


def test_no_rows_give_empty_boolean_masks() -> None:
    """A receiver that judged nothing gets masks it can index with, not an error or a stray row."""
    first = first_committers(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0))
    assert first.shape == (0,) and first.dtype == np.bool_
    kept, _ = collect(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=bool), np.array([2]), np.array([1.0]), np.array([5.0]))
    assert kept.shape == (0,) and kept.dtype == np.bool_


def test_drops_carry_the_stage_and_the_verdict_into_the_quarantine_reason() -> None:
    """Passing rows record nothing; the others name their stage, and the reason an operator reads."""
    drops = drops_of(["a", "b", "c"], [Verdict.OK, Verdict.LATE, Verdict.FORGED], stage=2)
    assert [(d.peer_id, d.stage, d.kind) for d in drops] == [("b", 2, "late"), ("c", 2, "payload")]
    book = SenderBook(TrustConfig(), me="me")
    assert book.close_round(1, drops) == {"c": "payload: forged"}
    assert isinstance(drops[0], Drop) and drops[0].reason == "late"


# --- exchange ----------------------------------------------------------------------------------


def test_a_receiver_that_needs_nothing_ends_at_its_start() -> None:
    """needed=0 (nothing to wait for): the phase is over at once, and later answers are not kept."""
    group = np.zeros(2, dtype=np.int64)
    kept, end = collect(group, np.array([1.0, 2.0]), np.ones(2, dtype=bool), np.array([0]), np.array([0.5]), np.array([9.0]))
    assert end.tolist() == [0.5] and not kept.any()


def test_a_phase_waits_for_every_answer_when_none_brings_data() -> None:
    """Receiver 0 needs one answer with data but both candidates say no: its phase ends when the
    last one answered, not at its start. Receiver 1 has no candidates at all: done at its start,
    not at the deadline."""
    group = np.zeros(2, dtype=np.int64)
    kept, end = collect(group, np.array([1.0, 2.0]), np.zeros(2, dtype=bool), np.array([1, 3]), np.array([0.5, 0.7]), np.array([9.0, 9.0]))
    assert end.tolist() == [2.0, 0.7] and not kept.any()


# --- strategy ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2])
def test_a_small_view_is_searched_to_the_end(n: int) -> None:
    """Up to 4n + 16 members the draw sees everyone: when all but n are quarantined, the n
    usable ones are asked in every round (a bounded random search would miss them now and then)."""
    live = [f"p{i:03d}" for i in range(4 * n + 16)]
    usable = set(live[1 : n + 1])
    strategy = make_strategy("pull_k", k=n)
    for round in range(60):
        plan = strategy.plan("sw", live[0], round, 0, live, skip=set(live[n + 1 :]))
        assert set(plan.candidates) == usable and plan.needed == n


def test_a_large_view_asks_good_members_before_offenders() -> None:
    """2,000 members, half quarantined and a third of the rest offenders: every plan still holds
    k + spares distinct members, none quarantined, none an offender while good ones remain."""
    live = [f"p{i:05d}" for i in range(2000)]
    skip = set(live[::2])
    low = set(live[1::6])
    strategy = make_strategy("pull_spare", k=4, spares=2, extra=1)
    for me in live[1:400:2]:
        plan = strategy.plan("sw", me, 3, 0, live, skip=skip, low=low)
        assert len(set(plan.candidates)) == 6 and plan.needed == 5
        assert not set(plan.candidates) & (skip | low | {me})


def test_offenders_fill_in_when_the_good_run_out_each_once() -> None:
    """One good member left: it comes first, then the offender, never the good one twice."""
    s = make_strategy("pull_spare", k=2, spares=0, extra=0)
    for round in range(10):
        plan = s.plan("sw", "peer-00", round, 0, PEERS[:4], skip={"peer-01"}, low={"peer-01", "peer-02"})
        assert plan.candidates == ("peer-03", "peer-02")


@pytest.mark.parametrize("name", ["pull_k", "pull_spare", "gossip"])
def test_draws_differ_by_swarm_round_and_stage(name: str) -> None:
    """Two swarms, two rounds or two stages (gossip: hops) do not reuse one fixed neighbourhood."""
    s = make_strategy(name, k=3) if name != "gossip" else make_strategy(name, fanout=3)
    by_swarm = {s.plan(f"sw{i}", "peer-00", 1, 0, PEERS, skip=()).candidates for i in range(10)}
    by_round = {s.plan("sw", "peer-00", r, 0, PEERS, skip=()).candidates for r in range(10)}
    by_stage = {s.plan("sw", "peer-00", 1, st, PEERS, skip=()).candidates for st in range(10)}
    assert min(len(by_swarm), len(by_round), len(by_stage)) > 5


def test_gossip_pushes_to_fanout_members_and_waits_for_nobody() -> None:
    """A gossip hop is a push: nothing to wait for before the reveal."""
    plan = make_strategy("gossip", fanout=2).plan("sw", "peer-00", 1, 0, PEERS, skip=())
    assert len(plan.candidates) == 2 and plan.needed == 0


def test_a_single_pull_is_allowed_and_draws_one_member() -> None:
    """k=1 is the smallest useful pull, so it is accepted and asks exactly one other member."""
    plan = make_strategy("pull_k", k=1).plan("sw", "peer-00", 1, 0, PEERS, skip=())
    assert len(plan.candidates) == 1 and plan.candidates[0] != "peer-00"


def test_strategy_parameters_are_checked_with_their_real_bounds() -> None:
    """The errors a user gets for a bad ``communication.strategy`` list what would be accepted."""
    with pytest.raises(ValueError, match="fanout must be >= 1"):
        make_strategy("gossip", fanout=0)  # a hop that pushes to nobody
    with pytest.raises(ValueError, match="spares must be >= 0"):
        make_strategy("pull_spare", spares=-1)
    assert make_strategy("pull_spare", k=1, spares=0, extra=0).want == 1
    with pytest.raises(ValueError, match="'all' takes no parameters, not k"):
        make_strategy("all", k=3)
    with pytest.raises(ValueError, match="takes extra, k, spares, not fanout, ttl"):
        make_strategy("pull_spare", fanout=2, ttl=1)


def test_a_late_sender_is_an_offender_for_the_late_window_only() -> None:
    """Late in round 5: asked last when planning rounds 5 .. 5 + LATE_WINDOW, and not before or after."""
    book = SenderBook(TrustConfig(), me="me")
    book.close_round(5, drops_of(["slow"], [Verdict.LATE], 0))
    assert offenders(book, 4) == frozenset()
    assert offenders(book, 5) == offenders(book, 5 + LATE_WINDOW) == {"slow"}
    assert offenders(book, 6 + LATE_WINDOW) == frozenset()


# --- view --------------------------------------------------------------------------------------


def test_the_attested_round_is_the_one_a_quorum_has_reached() -> None:
    """3 of 4 others are at round 8 or later (more than half): 8, not the minority's 9 or 10."""
    assert attested_round(5, [7, 8, 9, 10], 0.5, 50) == 8


def test_catch_up_follows_a_live_quorum_of_the_others() -> None:
    """A peer moves to the round the other live members announce; its own record and dead
    members' records do not count."""
    view = LiveView(timeout=5.0)
    view.record("me", 20, issued=0.0)
    for p in ("a", "b", "c"):
        view.record(p, 12, issued=0.0)
    view.record("dead", 40, issued=-10.0)
    assert view.catch_up("me", 10, now=1.0, quorum=0.5, max_jump=50) == 12


def test_forget_drops_every_trace_of_long_gone_members_only() -> None:
    """A forgotten member is gone from every book (no stale round or flag when it rejoins, and no
    growth under churn); a recently heard one is kept."""
    view = LiveView(timeout=3.0)
    view.record("old", 4, issued=0.0, leaving=True, reachable=False)
    view.record("recent", 9, issued=90.0, reachable=False)
    view.forget(now=100.0, after=60.0)
    assert view.heard == {"recent": 90.0} and view.rounds == {"recent": 9}
    assert view.left == set() and view.unreachable == {"recent"}


def test_a_member_that_comes_back_is_live_and_dialable_again() -> None:
    """A record without flags means present and reachable; a newer one clears an old leave or NAT."""
    view = LiveView(timeout=3.0)
    view.record("a", 1, issued=0.0)
    assert view.servers(1.0) == ["a"]
    view.record("b", 1, issued=0.0, leaving=True, reachable=False)
    view.record("b", 2, issued=1.0)
    assert view.live(2.0) == view.servers(2.0) == ["a", "b"]


def test_a_record_issued_at_the_same_instant_still_counts() -> None:
    """The simulator renews records at event times that can coincide: a record as new as the
    last one (not older) is applied, so the round a peer announced does not lag."""
    view = LiveView(timeout=3.0)
    view.record("a", 1, issued=5.0)
    view.record("a", 2, issued=5.0)
    assert view.rounds["a"] == 2


def test_a_member_is_live_until_exactly_the_timeout() -> None:
    """As in the transport's ``Members.live``: alive while the record's age is at most the timeout."""
    view = LiveView(timeout=3.0)
    view.record("a", 1, issued=10.0)
    assert view.live(13.0) == ["a"] and view.live(13.25) == []


def test_the_liveness_rule_at_its_edges() -> None:
    """One rule for the transport's member view and the simulator's (protocol.view.alive):
    alive up to exactly ``timeout`` after it was last heard of, never after it announced leaving."""
    assert alive(10.0, False, 13.0, 3.0) and alive(10.0, False, 10.0, 3.0)
    assert not alive(10.0, False, 13.001, 3.0)
    assert not alive(10.0, True, 10.0, 3.0)


def test_members_are_forgotten_after_a_minute_or_twenty_liveness_timeouts() -> None:
    assert forget_after(0.1) == 60.0 and forget_after(3.0) == 60.0 and forget_after(4.0) == 80.0
