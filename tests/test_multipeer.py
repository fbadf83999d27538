"""Multi-peer rules, checked with 3+ peers wherever code aggregates peers.

Coordinators: LocalCoordinator and the EVM coordinator (the contract on an in-process EVM) keep
the same books, so every rule here runs against both through one small ``Referee`` face:
the round's one win goes to the HIGHEST lower median, ties by the per-round hash, a duplicate
report counts once, a missing report costs only what it would have said, a report for a settled
round changes nothing.

Exchanges: 3+ peers on an in-memory board, with one peer sending for the wrong round or stage,
a duplicate post, or a member that never posts.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from genrl_swarm.comm import InMemoryBackend, InMemorySwarm
from genrl_swarm.comm.codec import Codec
from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core import Task
from genrl_swarm.core.interfaces import ExchangeResult
from genrl_swarm.core.types import RoundResult

from helpers import Echo, echo

warnings.filterwarnings("ignore", category=DeprecationWarning)
PEERS = ("p0", "p1", "p2", "p3")


# ------------------------------------------------------------------------------ coordinators
class Referee:
    """One coordinator seen from the swarm: ``report`` as peer, ``settle`` a round, read the books."""

    name = "?"

    def report(self, round: int, peer: str, rewards: dict[str, float]) -> None:
        raise NotImplementedError

    def report_again(self, round: int, peer: str, rewards: dict[str, float]) -> None:
        """A second report of the same round by the same peer: refused, the books unchanged."""
        raise NotImplementedError

    def finish(self, round: int) -> None:
        """The swarm moves on to round + 1; ``round`` still takes late reports."""
        raise NotImplementedError

    def settle(self, round: int) -> None:
        """Close ``round`` for good: no report can change it afterwards."""
        raise NotImplementedError

    def standings(self) -> dict[str, float]:
        raise NotImplementedError

    def wins(self) -> dict[str, int]:
        raise NotImplementedError

    def tie_winner(self, round: int, tied: list[str]) -> str:
        """Who the rules say wins a tie among ``tied`` in ``round`` (computed independently)."""
        raise NotImplementedError


class LocalReferee(Referee):
    name = "local"

    def __init__(self, peers: tuple[str, ...]) -> None:
        self.c = LocalCoordinator(settle_wait=0)
        self.peers = peers
        for peer in peers:
            self.c.register(peer)

    def report(self, round: int, peer: str, rewards: dict[str, float]) -> None:
        self.c.report(RoundResult(round, peer, rewards, ()))

    def report_again(self, round: int, peer: str, rewards: dict[str, float]) -> None:
        with pytest.raises(ValueError, match=f"peer {peer} already reported round {round}"):
            self.report(round, peer, rewards)

    def finish(self, round: int) -> None:
        self.c.finish_round(round)

    def settle(self, round: int) -> None:
        self.c.finish_round(round)
        self.c.finish_round(round + 1)  # round + 1 < current: frozen

    def standings(self) -> dict[str, float]:
        return dict(self.c.standings())

    def wins(self) -> dict[str, int]:
        return {p: self.c.tally(p)[1] for p in self.peers}

    def tie_winner(self, round: int, tied: list[str]) -> str:
        return min(tied, key=lambda p: hashlib.sha256(f"{round}:{p}".encode()).hexdigest())


class EvmSwarm:
    """The contract deployed once per module with every peer registered: peer i is account i,
    p0 the deployer, so the stage manager. Each test plays rounds of its own on it."""

    def __init__(self, chain: Any, tmp_path: Path, peers: tuple[str, ...]) -> None:
        from genrl_swarm.coord.evm import ChainClient, EvmCoordinator

        self.peers = peers
        address = ChainClient(chain.w3, chain.keys[0]).deploy(num_stages=1)
        self.contract = chain.w3.eth.contract(address=address, abi=chain.contract.abi)
        self.by_peer: dict[str, EvmCoordinator] = {}
        for i, peer in enumerate(peers):
            (tmp_path / f"k{i}").write_text(chain.keys[i])
            c = EvmCoordinator(contract=address, key_file=str(tmp_path / f"k{i}"), w3=chain.w3, round_wait=0)
            c.register(peer)
            self.by_peer[peer] = c
        signed = {p: c.account for p, c in self.by_peer.items()}
        for c in self.by_peer.values():
            c.learn_accounts(signed)
        self.manager = self.by_peer[peers[0]]


class EvmReferee(Referee):
    """Rounds are counted from the chain's round when the test starts; the books are what the
    test added to them."""

    name = "evm"

    def __init__(self, swarm: EvmSwarm) -> None:
        self.swarm, self.peers, self.manager = swarm, swarm.peers, swarm.manager
        self.base = self.manager.current_round()
        self._standings, self._wins = self.manager.standings(), self._all_wins()

    def report(self, round: int, peer: str, rewards: dict[str, float]) -> None:
        self.swarm.by_peer[peer].report(RoundResult(self.base + round, peer, rewards, ()))

    def report_again(self, round: int, peer: str, rewards: dict[str, float]) -> None:
        self.report(round, peer, rewards)  # AlreadyScored: taken as done, not raised
        assert self.swarm.contract.functions.hasScored(self.base + round, self.swarm.by_peer[peer].account).call()

    def finish(self, round: int) -> None:
        self.manager.finish_round(self.base + round)

    def settle(self, round: int) -> None:
        while self.manager.current_round() < self.base + round + 2:
            self.manager.finish_round(self.manager.current_round())
        assert self.swarm.contract.functions.roundStatus(self.base + round).call()[0], f"round {round} not finalized"

    def standings(self) -> dict[str, float]:
        return {p: v - self._standings[p] for p, v in self.manager.standings().items()}

    def _all_wins(self) -> dict[str, int]:
        return {p: self.manager.tally(p)[1] for p in self.peers}

    def wins(self) -> dict[str, int]:
        return {p: v - self._wins[p] for p, v in self._all_wins().items()}

    def tie_winner(self, round: int, tied: list[str]) -> str:
        from eth_abi import encode
        from eth_utils import keccak

        def order(peer: str) -> int:
            key = encode(["uint256", "address"], [self.base + round, self.swarm.by_peer[peer].account])
            return int.from_bytes(keccak(key), "big")

        return min(tied, key=order)


@pytest.fixture(scope="module")
def evm_swarm(tmp_path_factory: pytest.TempPathFactory) -> EvmSwarm:
    pytest.importorskip("web3")
    from eth.estimators.gas import binary_gas_search

    from test_contract import Chain

    chain = Chain(accounts=len(PEERS))
    # Gas estimates at the block limit: one execution per estimate instead of ~14 (a revert
    # still raises while estimating, as on a node); the chain's rules are unchanged.
    chain.w3.provider.ethereum_tester.backend.chain.gas_estimator = binary_gas_search(tolerance=10**12)
    return EvmSwarm(chain, tmp_path_factory.mktemp("keys"), PEERS)


@pytest.fixture(params=["local", "evm"])
def referee(request: pytest.FixtureRequest) -> Referee:
    if request.param == "local":
        return LocalReferee(PEERS)
    return EvmReferee(request.getfixturevalue("evm_swarm"))


def everyone_reports(ref: Referee, round: int, score_of: dict[str, float]) -> None:
    """Every peer scores every peer, itself included, with the same value ``score_of[peer]``."""
    for reporter in PEERS:
        ref.report(round, reporter, dict(score_of))


def test_the_highest_median_wins_among_four_peers(referee: Referee) -> None:
    everyone_reports(referee, 0, {"p0": 0.25, "p1": 0.5, "p2": 0.75, "p3": 0.0})
    referee.settle(0)
    assert referee.wins() == {"p0": 0, "p1": 0, "p2": 1, "p3": 0}  # the lowest median (p3) must not win
    assert referee.standings() == {"p0": 0.25, "p1": 0.5, "p2": 0.75, "p3": 0.0}


def test_the_highest_median_wins_whatever_its_place_in_the_reports(referee: Referee) -> None:
    everyone_reports(referee, 0, {"p0": 0.75, "p1": 0.5, "p2": 0.25, "p3": 0.5})
    referee.settle(0)
    assert referee.wins() == {"p0": 1, "p1": 0, "p2": 0, "p3": 0}


def test_a_tie_goes_to_one_peer_by_the_per_round_hash(referee: Referee) -> None:
    for r in (0, 2):
        everyone_reports(referee, r, {"p0": 0.25, "p1": 0.75, "p2": 0.75, "p3": 0.75})
        referee.settle(r)
    expected = dict.fromkeys(PEERS, 0)
    for r in (0, 2):
        expected[referee.tie_winner(r, ["p1", "p2", "p3"])] += 1
    assert referee.wins() == expected
    assert referee.standings() == {"p0": 0.5, "p1": 1.5, "p2": 1.5, "p3": 1.5}


def test_rewards_are_the_median_of_all_the_voters_scores(referee: Referee) -> None:
    referee.report(0, "p0", {"p0": 0.5, "p1": 0.25, "p2": 0.5, "p3": 1.0})
    referee.report(0, "p1", {"p0": 0.5, "p1": 0.5, "p2": 0.75, "p3": 0.25})
    referee.report(0, "p2", {"p0": 1.0, "p1": 0.75, "p2": 0.75, "p3": 0.5})
    referee.report(0, "p3", {"p0": 0.25, "p1": 0.5, "p2": 1.0, "p3": 0.5})
    referee.settle(0)
    # four voters and the NEUTRAL tie-breaker: p0: (0, .25, .5, .5, 1) -> .5; p1: (0, .25, .5, .5, .75) -> .5;
    # p2: (0, .5, .75, .75, 1) -> .75; p3: (0, .25, .5, .5, 1) -> .5
    assert referee.standings() == {"p0": 0.5, "p1": 0.5, "p2": 0.75, "p3": 0.5}
    assert referee.wins()["p2"] == 1


def test_a_duplicate_report_counts_once(referee: Referee) -> None:
    referee.report(0, "p0", {"p0": 0.25, "p1": 0.5, "p2": 0.25, "p3": 0.25})
    referee.report_again(0, "p0", {"p1": 0.0, "p2": 1.0, "p3": 1.0})  # neither replaces nor adds
    referee.report(0, "p1", {"p0": 0.25, "p1": 0.25, "p2": 0.25, "p3": 0.25})
    referee.report(0, "p2", {"p0": 0.25, "p1": 0.75, "p2": 0.25, "p3": 0.25})
    referee.settle(0)
    # p1: (0.25, 0.5, 0.75) -> 0.5; had the second report been taken instead, p0's 0.0 would make it 0.25
    assert referee.standings() == {"p0": 0.25, "p1": 0.5, "p2": 0.25, "p3": 0.25}
    assert referee.wins() == {"p0": 0, "p1": 1, "p2": 0, "p3": 0}


def test_a_missing_report_costs_only_its_own_scores(referee: Referee) -> None:
    referee.report(0, "p0", {"p0": 0.5, "p1": 0.5, "p2": 0.25, "p3": 0.75})
    referee.report(0, "p1", {"p0": 0.75, "p1": 0.5, "p2": 0.5, "p3": 0.75})
    referee.report(0, "p2", {"p0": 0.5, "p1": 1.0, "p2": 0.25, "p3": 0.75})  # p3 never reports
    referee.settle(0)
    # three voters: p0: (.5, .5, .75) -> .5; p1: (.5, .5, 1) -> .5; p2: (.25, .25, .5) -> .25; p3: (.75, .75, .75) -> .75
    assert referee.standings() == {"p0": 0.5, "p1": 0.5, "p2": 0.25, "p3": 0.75}
    assert referee.wins() == {"p0": 0, "p1": 0, "p2": 0, "p3": 1}


def test_a_report_for_a_settled_round_changes_nothing(referee: Referee, caplog: pytest.LogCaptureFixture) -> None:
    referee.report(0, "p0", {"p0": 0.25, "p1": 0.5, "p2": 0.25})
    referee.report(0, "p1", {"p0": 0.25, "p1": 0.5, "p2": 0.25})
    referee.settle(0)
    before = referee.standings(), referee.wins()
    with caplog.at_level(logging.WARNING):
        referee.report(0, "p2", {"p0": 1.0, "p1": 0.0, "p3": 1.0})  # too late: round 0 is settled
    assert (referee.standings(), referee.wins()) == before
    assert "RoundClosed" in caplog.text or "settled already" in caplog.text


def test_a_late_report_for_the_previous_round_still_counts(referee: Referee) -> None:
    referee.report(0, "p0", {"p0": 0.25, "p1": 0.5, "p2": 0.25})
    referee.report(0, "p1", {"p0": 0.25, "p1": 0.5, "p2": 0.5})
    referee.finish(0)
    referee.report(0, "p2", {"p0": 0.5, "p1": 1.0, "p2": 0.25})  # the grace round: round 0 is the previous one
    referee.settle(0)
    assert referee.standings() == {"p0": 0.25, "p1": 0.5, "p2": 0.25, "p3": 0.0}
    assert referee.wins() == {"p0": 0, "p1": 1, "p2": 0, "p3": 0}


def test_rounds_add_up_and_give_one_win_each(referee: Referee) -> None:
    everyone_reports(referee, 0, {"p0": 0.25, "p1": 0.5, "p2": 0.0, "p3": 0.0})
    referee.settle(0)
    everyone_reports(referee, 2, {"p0": 0.75, "p1": 0.0, "p2": 0.0, "p3": 0.25})
    referee.settle(2)
    assert referee.standings() == {"p0": 1.0, "p1": 0.5, "p2": 0.0, "p3": 0.25}
    assert referee.wins() == {"p0": 1, "p1": 1, "p2": 0, "p3": 0}


def test_local_books_are_the_same_before_and_after_a_round_settles() -> None:
    """Open rounds count in the standings exactly as they will once frozen."""
    ref = LocalReferee(PEERS)
    everyone_reports(ref, 0, {"p0": 0.25, "p1": 0.75, "p2": 0.5, "p3": 0.0})
    everyone_reports(ref, 1, {"p0": 0.5, "p1": 0.0, "p2": 0.0, "p3": 0.25})
    open_books = ref.standings(), ref.wins()
    ref.settle(1)  # freezes round 0 and round 1
    assert (
        (ref.standings(), ref.wins())
        == open_books
        == (
            {"p0": 0.75, "p1": 0.75, "p2": 0.5, "p3": 0.25},
            {"p0": 1, "p1": 1, "p2": 0, "p3": 0},
        )
    )


def test_evm_report_for_a_round_the_chain_has_not_reached_is_refused(evm_swarm: EvmSwarm) -> None:
    from genrl_swarm.coord.errors import CoordinatorError

    ref = EvmReferee(evm_swarm)
    want = rf"the chain is at round {ref.base}, this peer finished round {ref.base + 2}: no stage manager advanced it within 0s"
    with pytest.raises(CoordinatorError, match=want):
        ref.report(2, "p1", {"p0": 1.0})
    assert not evm_swarm.contract.functions.hasScored(ref.base + 2, evm_swarm.by_peer["p1"].account).call()


# ------------------------------------------------------------------------------ exchanges
def honest_exchange(peers: list[InMemoryBackend], round: int, stage: int, timeout: float = 1.0) -> dict[str, ExchangeResult]:
    """Every peer in ``peers`` exchanges its own one body at once (threads); results by peer."""
    out: dict[str, ExchangeResult] = {}

    def one(peer: InMemoryBackend) -> None:
        out[peer.peer_id] = peer.exchange(round, stage, [mine(peer.peer_id, stage)], timeout, Echo)

    threads = [threading.Thread(target=one, args=(p,)) for p in peers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return out


def mine(peer: str, stage: int = 0) -> Echo:
    return echo(Task.create("q").input(stage), peer)


def member_posts(
    swarm: InMemorySwarm,
    member: InMemoryBackend,
    round: int,
    stage: int,
    payload: bytes,
    reveal_after: float = 0.2,
    signed_for: tuple[int, int] | None = None,
) -> None:
    """``member`` commits to ``payload`` (signed for ``signed_for`` round/stage if given) now and reveals
    it once the others are past their commit phase (a member's reveal closes the commit phase)."""
    from genrl_swarm.comm.codec import Commitment, encode_signed

    signed_round, signed_stage = signed_for or (round, stage)
    digest = hashlib.sha256(payload).digest()
    record = Commitment("genrl-swarm", swarm.epoch.value, signed_round, signed_stage, member.peer_id, digest, len(payload))
    swarm.post(round, stage, "commit", member.peer_id, encode_signed("commit", record, member.identity.sign), member._handle)
    threading.Timer(reveal_after, swarm.post, (round, stage, "reveal", member.peer_id, payload, member._handle)).start()


def trio_and(odd: str) -> tuple[InMemorySwarm, list[InMemoryBackend], InMemoryBackend]:
    swarm = InMemorySwarm()
    honest = [InMemoryBackend(swarm, n) for n in ("a", "b", "c")]
    return swarm, honest, InMemoryBackend(swarm, odd)


@pytest.mark.parametrize("round, stage", [(0, 1), (3, 0)])
def test_an_envelope_for_another_stage_or_round_is_dropped_by_every_peer(round: int, stage: int) -> None:
    swarm, honest, odd = trio_and("d")
    member_posts(swarm, odd, 0, 0, Codec().encode("d", round, stage, [mine("d", stage)]))  # committed for r0/s0
    results = honest_exchange(honest, 0, 0)
    for peer, result in results.items():
        assert next(iter(result.received)) == peer and result.received == {p: (mine(p),) for p in "abc"}
        assert result.dropped == {"d": f"envelope says d r{round}/s{stage}, its commitment d r0/s0"}


@pytest.mark.parametrize("signed_for", [(0, 1), (1, 0)])
def test_a_commitment_signed_for_another_stage_or_round_is_dropped_by_every_peer(signed_for: tuple[int, int]) -> None:
    swarm, honest, odd = trio_and("d")
    member_posts(swarm, odd, 0, 0, Codec().encode("d", 0, 0, [mine("d")]), signed_for=signed_for)
    where = ("genrl-swarm", *signed_for, "d")
    for result in honest_exchange(honest, 0, 0).values():
        assert sorted(result.received) == ["a", "b", "c"]
        assert result.dropped == {"d": f"commitment is for {where}, not ('genrl-swarm', 0, 0, 'd')"}


def test_a_duplicate_post_counts_once_the_first_one() -> None:
    swarm, honest, odd = trio_and("d")
    first, second = (Codec().encode("d", 0, 0, [mine(text)]) for text in ("d", "again"))
    member_posts(swarm, odd, 0, 0, first)
    member_posts(swarm, odd, 0, 0, second, reveal_after=0.3)  # write-once: neither its commitment nor its reveal replaces the first
    for result in honest_exchange(honest, 0, 0).values():
        assert result.received == {p: (mine(p),) for p in "abcd"} and result.dropped == {}
        assert result.sizes["d"] == len(first)


def test_a_missing_member_is_late_for_everyone_and_the_rest_still_exchange() -> None:
    _, honest, _silent = trio_and("silent")
    results = honest_exchange(honest, 0, 0, timeout=0.6)
    assert sorted(results) == ["a", "b", "c"]
    for peer, result in results.items():
        assert next(iter(result.received)) == peer  # own bodies first
        assert result.received == {p: (mine(p),) for p in "abc"} and result.expected == 4
        assert result.dropped == {"silent": "late: no commitment before the deadline"}


def test_a_member_that_commits_but_never_reveals_is_late_and_the_others_count() -> None:
    swarm, honest, odd = trio_and("d")
    from genrl_swarm.comm.codec import Commitment, encode_signed

    payload = Codec().encode("d", 0, 0, [mine("d")])
    record = Commitment("genrl-swarm", swarm.epoch.value, 0, 0, "d", hashlib.sha256(payload).digest(), len(payload))
    swarm.post(0, 0, "commit", "d", encode_signed("commit", record, odd.identity.sign), odd._handle)
    for result in honest_exchange(honest, 0, 0, timeout=0.6).values():
        assert result.received == {p: (mine(p),) for p in "abc"}
        assert result.dropped == {"d": "late: committed but revealed nothing before the deadline"}
