"""Rewards no half can move (issue 42.4), locally and on the EVM through the peers' own client.

Each attack here succeeded before: with an even number of voters the neutral tie-break handed an
exact half the outcome (2 honest + 2 colluders scoring the honest 0 set the honest rewards to 0),
self-reporting Sybils were NEUTRAL votes on everyone (4 of them outvoted 3 honest reporters), and
the contract selected each median over scores in the voters' order, so an adversarial order made
settling a 1,000-voter peer ~100x the comparisons of a random one.
"""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import pytest

from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.coord.scores import round_reward
from genrl_swarm.core.types import RoundResult

warnings.filterwarnings("ignore", category=DeprecationWarning)
web3 = pytest.importorskip("web3")  # test_contract's Chain (the in-process EVM) needs the chain extra
from test_contract import Chain  # noqa: E402
from test_trust_v3_rewards import peers_on, totals  # noqa: E402

from helpers.quickselect import adversarial_order, select  # noqa: E402

HONEST, COLLUDER_SELF, HONEST_VIEW_OF_COLLUDERS = 0.5, 0.5, 0.25
ROUNDS = 3


def honest_report(me: str, honest: list[str], colluders: list[str]) -> dict[str, float]:
    return {**dict.fromkeys(honest, HONEST), **dict.fromkeys(colluders, HONEST_VIEW_OF_COLLUDERS)}


def colluder_report(honest: list[str], colluders: list[str]) -> dict[str, float]:
    """No extreme score: just 0 for the honest and a modest claim for the coalition."""
    return {**dict.fromkeys(honest, 0.0), **dict.fromkeys(colluders, COLLUDER_SELF)}


def test_local_two_colluders_cannot_lower_two_honest_peers() -> None:
    honest, colluders = ["a", "b"], ["c", "d"]
    coordinator = LocalCoordinator(settle_wait=0)
    for peer in honest + colluders:
        coordinator.register(peer)
    for r in range(ROUNDS):
        for me in honest:
            coordinator.report(RoundResult(r, me, honest_report(me, honest, colluders), ()))
        for me in colluders:
            coordinator.report(RoundResult(r, me, colluder_report(honest, colluders), ()))
        coordinator.finish_round(r)
    assert [coordinator.tally(p)[0] for p in honest] == [ROUNDS * HONEST] * 2  # before: 0.0 each
    # What an exact half can still do: its members get their own claims (the tie is theirs too).
    assert [coordinator.tally(p)[0] for p in colluders] == [ROUNDS * COLLUDER_SELF] * 2


def test_local_self_reporting_sybils_do_not_outvote_the_reporters() -> None:
    honest, sybils = ["a", "b", "c"], ["s1", "s2", "s3", "s4"]
    coordinator = LocalCoordinator(settle_wait=0)
    for peer in honest + sybils:
        coordinator.register(peer)
    for r in range(ROUNDS):
        for me in honest:
            coordinator.report(RoundResult(r, me, dict.fromkeys(honest, HONEST), ()))
        for me in sybils:
            coordinator.report(RoundResult(r, me, {me: 1e6}, ()))
        coordinator.finish_round(r)
    assert [coordinator.tally(p)[0] for p in honest] == [ROUNDS * HONEST] * 3  # before: 0.0 each
    assert [coordinator.tally(p)[0] for p in sybils] == [0.0] * 4  # one vote of four on itself


@pytest.mark.slow  # the contract on an in-process EVM
def test_two_colluders_cannot_lower_two_honest_peers_on_chain(tmp_path: Path) -> None:
    chain = Chain(accounts=4)
    peers = peers_on(chain, tmp_path, 4)
    honest, colluders = ["p0", "p1"], ["p2", "p3"]
    for r in range(ROUNDS):
        for i, c in enumerate(peers):
            me = f"p{i}"
            report = honest_report(me, honest, colluders) if me in honest else colluder_report(honest, colluders)
            c.report(RoundResult(r, me, report, ()))
        peers[0].finish_round(r)
    peers[0].finish_round(ROUNDS)
    assert totals(chain, 0, 1) == [ROUNDS * HONEST] * 2  # before: 0.0 each
    assert totals(chain, 2, 3) == [ROUNDS * COLLUDER_SELF] * 2


@pytest.mark.slow  # the contract on an in-process EVM
def test_self_reporting_sybils_do_not_outvote_the_reporters_on_chain(tmp_path: Path) -> None:
    chain = Chain(accounts=7)
    honest = peers_on(chain, tmp_path, 3)
    sybils = range(3, 7)
    chain.register(*sybils)
    for r in range(ROUNDS):
        for i, c in enumerate(honest):
            c.report(RoundResult(r, f"p{i}", {f"p{j}": HONEST for j in range(3)}, ()))
        for who in sybils:
            chain.score(who, r, {who: 1e6})
        honest[0].finish_round(r)
    honest[0].finish_round(ROUNDS)
    assert totals(chain, 0, 1, 2) == [ROUNDS * HONEST] * 3  # before: 0.0 each
    assert totals(chain, *sybils) == [0.0] * 4


VOTERS = 1000


@pytest.mark.slow  # 1,000 accounts on an in-process EVM (about a minute)
def test_settling_costs_the_same_whatever_the_order_of_the_scores() -> None:
    """1,000 voters score peer A in a random order and peer B in the order that makes the old
    contract's quickselect quadratic (376,250 comparisons against 3,550); each peer is settled
    alone. Before: B's page cost about 100x A's; now within 1.2x (a count per score, one pass)."""
    k = (VOTERS + 1 - 1) // 2 - 1  # the old _reward's index: 1,000 positive votes and one NEUTRAL, below them all
    hostile = adversarial_order(VOTERS, k)
    shuffled = hostile.copy()
    random.Random(0).shuffle(shuffled)
    assert select(hostile.copy(), k)[1] > 50 * select(shuffled.copy(), k)[1]  # the order the old contract lost to
    chain = Chain(accounts=VOTERS)
    chain.bulk([(who, "registerPeer", (f"v{who}",)) for who in range(VOTERS)])
    a, b = chain.acct(0), chain.acct(1)
    low, high = sorted((a, b), key=lambda x: int(x, 16))
    value = {a: shuffled, b: hostile}
    chain.bulk([(who, "submitScores", (0, [low, high], [value[low][who] * 1000, value[high][who] * 1000])) for who in range(VOTERS)])
    chain.send(0, "advanceRound")
    chain.send(0, "advanceRound")
    gas = {}
    for _ in range(2):
        (peer,) = chain.read("scoredPeers", 0, chain.read("roundPage", 0)[0], 1)
        gas[peer] = int(chain.settle(0, page=1)["gasUsed"])
    assert chain.read("roundStatus", 0)[0]
    scaled = {peer: [v * 1000 for v in values] for peer, values in value.items()}
    own = {a: scaled[a][0], b: scaled[b][1]}  # accounts 0 and 1 vote too: their own scores break the tie
    assert chain.totals(0, 1) == [round_reward(scaled[p], VOTERS, own[p]) for p in (a, b)]
    assert max(gas.values()) <= 1.2 * min(gas.values()), gas


def test_the_voters_on_a_peer_and_its_tie_break() -> None:
    """coord/scores.py's rule, which LocalCoordinator uses and the contract verifies."""
    from genrl_swarm.coord.scores import round_rewards

    coalition = {"a": 0.0, "b": 0.0, "c": 0.5, "d": 0.5}
    reports = {"a": {"a": 0.5, "b": 0.5}, "b": {"a": 0.5, "b": 0.5}, "c": coalition, "d": coalition}
    assert round_rewards(reports) == {"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.5}  # 4 voters on each: ties to their own word
    sybils = {f"s{i}": {f"s{i}": 1e6} for i in range(4)}
    honest = {p: dict.fromkeys("abc", 0.5) for p in "abc"}
    rewards = round_rewards(honest | sybils)
    assert [rewards[p] for p in "abc"] == [0.5] * 3  # 3 voters on each: the self-reports are no votes on them
    assert [rewards[s] for s in sybils] == [0.0] * 4  # 4 voters on each (3 NEUTRAL), the tie to its own 1e6: the median is 0
    assert round_rewards({"a": {"absent": 1e6}, "b": {"a": 1.0}})["absent"] == 0.0  # no own word to break the tie: NEUTRAL
