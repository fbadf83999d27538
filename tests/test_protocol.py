"""The sans-I/O protocol core on its own: deterministic schedules, a dead peer, a hostile peer.
No sockets, no threads, no clock: every time is an argument."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from genrl_swarm.core.trust import SenderBook, TrustConfig
from genrl_swarm.protocol import (
    REVEAL_SHARE,
    Deadlines,
    LiveView,
    Verdict,
    attested_round,
    classify,
    collect,
    drops_of,
    first_committers,
    make_strategy,
    offenders,
)

PEERS = [f"peer-{i:02d}" for i in range(12)]


def test_plans_are_a_pure_function_of_swarm_peer_round_stage_and_view() -> None:
    s = make_strategy("pull_spare", k=3, spares=2, extra=1)
    plan = s.plan("sw", "peer-00", 5, 1, PEERS, skip=())
    assert plan == s.plan("sw", "peer-00", 5, 1, list(PEERS), skip=set())  # recomputable anywhere
    assert len(plan.candidates) == 5 and plan.needed == 4 and "peer-00" not in plan.candidates
    assert len(set(plan.candidates)) == 5
    other = {s.plan("sw", "peer-00", r, 1, PEERS, skip=()).candidates for r in range(20)}
    assert len(other) > 10  # a new draw each round, not a fixed neighbourhood
    assert make_strategy("all").plan("sw", "peer-00", 0, 0, PEERS, skip={"peer-03"}).candidates == tuple(p for p in PEERS[1:] if p != "peer-03")


def test_large_swarm_draws_are_spread_over_the_members() -> None:
    """Rejection sampling in a 5,000-member view: every member asked about equally often."""
    live = [f"p{i:05d}" for i in range(5000)]
    s = make_strategy("pull_k", k=8)
    asked = Counter(c for me in live[:2500] for c in s.plan("sw", me, 1, 0, live, skip=()).candidates)
    assert sum(asked.values()) == 2500 * 8
    load = np.array([asked.get(p, 0) for p in live])
    assert abs(load.var() - 4.0) < 0.8 and load.max() <= 20  # Poisson(4): nobody is herded onto


def test_quarantined_are_skipped_and_offenders_asked_last() -> None:
    book = SenderBook(TrustConfig(quarantine_rounds=2), me="peer-00")
    book.close_round(3, drops_of(["peer-01", "peer-02"], [Verdict.FORGED, Verdict.LATE], 0))
    assert book.quarantined(4) == {"peer-01"}
    low = offenders(book, 4)
    assert low == {"peer-01", "peer-02"}
    s = make_strategy("pull_spare", k=2, spares=0, extra=0)
    for r in range(30):
        plan = s.plan("sw", "peer-00", r, 0, PEERS[:4], skip=book.quarantined(4), low=low)
        assert "peer-01" not in plan.candidates
        assert plan.candidates[-1] == "peer-02" or "peer-02" not in plan.candidates
        assert "peer-03" in plan.candidates  # the good member always comes first


def test_dead_peer_stays_live_until_its_record_expires_and_a_leaver_goes_at_once() -> None:
    view = LiveView(timeout=3.0)
    for p in ("a", "b", "c"):
        view.record(p, 1, issued=10.0)
    view.sighted("b", 12.0)  # traffic keeps b alive past its record
    view.record("c", 1, issued=11.0, leaving=True)
    view.record("c", 1, issued=10.5)  # an older copy from a slow DHT node moves nobody back
    assert view.live(12.5) == ["a", "b"]
    assert view.live(13.5) == ["b"]  # a crashed at 10: waited for 3 s, no longer
    assert view.live(15.5) == []


def test_a_dead_candidate_costs_pull_k_the_deadline_but_not_pull_spare() -> None:
    # receiver 0 asks 4 candidates; the third one is dead (never answers)
    group = np.zeros(4, dtype=np.int64)
    arrival = np.array([1.0, 1.2, np.inf, 1.1])
    ok = np.array([True, True, False, True])
    start, deadline = np.array([0.5]), np.array([22.5])
    kept, end = collect(group, arrival, ok, np.array([4]), start, deadline)  # pull_k: wait for all
    assert end[0] == 22.5 and kept.tolist() == [True, True, False, True]
    kept, end = collect(group, arrival, ok, np.array([3]), start, deadline)  # pull_spare: 3 of 4
    assert end[0] == 1.2 and kept.sum() == 3
    gone = np.array([1.0, 1.2, 1.3, 1.1])  # the dead one answered "gone": nothing left to wait for
    kept, end = collect(group, gone, ok, np.array([4]), start, deadline)
    assert end[0] == 1.3 and kept.sum() == 3


def test_collect_settles_many_receivers_at_once() -> None:
    group = np.array([1, 0, 1, 0, 1], dtype=np.int64)
    arrival = np.array([3.0, 2.0, 1.0, 5.0, 2.0])
    ok = np.ones(5, dtype=bool)
    kept, end = collect(group, arrival, ok, np.array([1, 2]), np.zeros(2), np.full(2, 4.0))
    assert end.tolist() == [2.0, 2.0]
    assert kept.tolist() == [False, True, True, False, True]
    _, empty = collect(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=bool), np.array([0]), np.array([7.0]), np.array([9.0]))
    assert empty.tolist() == [7.0]


def test_deadlines_keep_the_reveal_share_for_reveals() -> None:
    assert REVEAL_SHARE == 0.25  # the transport's deadlines are these: tests/test_comm_units.py
    d = Deadlines.of(100.0, 20.0)
    assert (d.commit, d.reveal) == (115.0, 120.0)


def test_hostile_rows_get_the_transports_verdicts_in_its_order() -> None:
    signed = np.array([True, False, True, True, True, False])
    size = np.array([10, 10, 99, 10, 10, 99], dtype=np.int64)
    revealed = np.array([True, True, True, False, True, False])
    matches = np.array([True, True, True, False, False, False])
    v = classify(signed, size, 50, revealed, matches)
    assert [Verdict(x) for x in v] == [Verdict.OK, Verdict.FORGED, Verdict.OVER_BUDGET, Verdict.LATE, Verdict.FORGED, Verdict.FORGED]


def test_a_copy_counts_for_the_earlier_commitment_only() -> None:
    group = np.array([0, 0, 0, 1, 1], dtype=np.int64)
    digest = np.array([7, 7, 8, 8, 8], dtype=np.int64)  # receiver 1 sees 8 too: its own first
    committed = np.array([2.0, 1.0, 3.0, 1.0, 2.0])
    assert first_committers(group, digest, committed).tolist() == [False, True, True, True, False]


def test_hostile_peer_is_quarantined_then_never_asked_while_it_lasts() -> None:
    book = SenderBook(TrustConfig(quarantine_rounds=3), me="peer-00")
    s = make_strategy("pull_k", k=11)
    assert "peer-05" in s.plan("sw", "peer-00", 1, 0, PEERS, skip=book.quarantined(1)).candidates
    new = book.close_round(1, drops_of(["peer-05"], [Verdict.OVER_BUDGET], 0))
    assert "peer-05" in new and new["peer-05"].startswith("budget")
    for r in (2, 3, 4):
        assert "peer-05" not in s.plan("sw", "peer-00", r, 0, PEERS, skip=book.quarantined(r)).candidates
    assert "peer-05" in s.plan("sw", "peer-00", 5, 0, PEERS, skip=book.quarantined(5)).candidates  # served its time


def test_far_future_announcements_move_nobody_without_a_quorum() -> None:
    view = LiveView(timeout=5.0)
    for p, r in (("a", 7), ("b", 7), ("c", 7), ("evil", 10_000)):
        view.record(p, r, issued=0.0)
    assert view.catch_up("a", 7, now=1.0, quorum=0.5, max_jump=50) == 7
    assert attested_round(7, [10_000, 10_000, 9], 0.5, 50) == 57  # a quorum still moves max_jump at most
    assert attested_round(3, [], 0.5, 50) == 3


def test_unknown_strategies_and_parameters_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="choose one of all, pull_k, pull_spare, gossip"):
        make_strategy("flood")
    with pytest.raises(ValueError, match="takes k, not fanout"):
        make_strategy("pull_k", fanout=2)
    with pytest.raises(ValueError, match="k must be >= 1"):
        make_strategy("pull_spare", k=0)
