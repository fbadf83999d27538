"""Rewards no minority can capture (issue 28, point 5), attacked on the contract in the in-process
EVM through the peers' own client, and on LocalCoordinator. Each attack here succeeded before:
an absent account's friend gave it 1e6 a round and the win; one hostile peer of three drove the
honest peers to -1e6 a round; Sybil scores ran finalizeRound out of gas and the client raised."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest

from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core.types import RoundResult

warnings.filterwarnings("ignore", category=DeprecationWarning)
web3 = pytest.importorskip("web3")  # test_contract's Chain (the in-process EVM) needs the chain extra
from genrl_swarm.coord.errors import CoordinatorError  # noqa: E402
from genrl_swarm.coord.evm import ContractRevert, EvmCoordinator  # noqa: E402
from test_contract import MAX_SCORE, SCALE, Chain  # noqa: E402

MAX = MAX_SCORE / SCALE


def peers_on(chain: Chain, tmp_path: Path, n: int) -> list[EvmCoordinator]:
    """Peers p0..p(n-1) on accounts 0..n-1 (p0 the stage manager), registered, knowing each other."""
    out = []
    for i in range(n):
        (tmp_path / f"k{i}").write_text(chain.keys[i])
        c = EvmCoordinator(contract=chain.address, key_file=str(tmp_path / f"k{i}"), w3=chain.w3, round_wait=0)
        c.register(f"p{i}")
        out.append(c)
    signed = {f"p{i}": c.account for i, c in enumerate(out)}
    for c in out:
        c.learn_accounts(signed)
    return out


def totals(chain: Chain, *who: int) -> list[float]:
    return [t / SCALE for t in chain.totals(*who)]


def test_an_account_nobody_honest_scores_gains_nothing_from_its_friend(tmp_path: Path) -> None:
    """Accounts 0-3 are honest peers scoring each other 0.5; account 4 is a friend giving the
    absent account 5 the maximum every round, and, once account 6 registers in round 1, account 6
    the maximum for round 0 too (old contract: 1e6 a round and the wins to the absent ones)."""
    chain = Chain(accounts=7)
    honest = peers_on(chain, tmp_path, 4)
    chain.register(4, 5)
    for r in range(3):
        for i, c in enumerate(honest):
            c.report(RoundResult(r, f"p{i}", {f"p{j}": 0.5 for j in range(4)}, ()))
        if r == 1:  # the grace round of round 0: 6 is scored for a round it never played
            chain.register(6)
            chain.score(4, 0, {5: MAX, 6: MAX})
        if r > 0:
            chain.score(4, r, {5: MAX})
        honest[0].finish_round(r)
    honest[0].finish_round(3)
    assert totals(chain, 5, 6) == [0.0, 0.0]
    assert chain.wins(5, 6) == [0, 0]
    assert totals(chain, 0, 1, 2, 3) == [1.5] * 4


def test_one_hostile_peer_of_three_cannot_move_the_honest_rewards(tmp_path: Path) -> None:
    """p2 scores the honest p0 and p1 at -1e6 and itself at +1e6 (old contract: both honest
    peers at -1e6 a round, p2 every win)."""
    chain = Chain(accounts=3)
    p0, p1, p2 = peers_on(chain, tmp_path, 3)
    for r in range(3):
        honest = {"p0": 0.5, "p1": 0.5, "p2": 0.0}
        p0.report(RoundResult(r, "p0", honest, ()))
        p1.report(RoundResult(r, "p1", honest, ()))
        p2.report(RoundResult(r, "p2", {"p0": -MAX, "p1": -MAX, "p2": MAX}, ()))
        p0.finish_round(r)
    p0.finish_round(3)
    assert totals(chain, 0, 1, 2) == [1.5, 1.5, 0.0]
    assert chain.wins(2) == [0] and sum(chain.wins(0, 1)) == 3


@pytest.mark.slow  # settles on the EVM
def test_sybil_scores_do_not_run_settlement_out_of_gas(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """80 Sybil accounts each score 20 of themselves at the maximum on a chain of 2.5M-gas blocks;
    the honest stage manager settles the round in pages (old contract: one finalizeRound over
    every score, more gas than a block, and the honest client raised)."""
    sybils = range(3, 83)
    chain = Chain(accounts=83, block_gas=2_500_000)
    honest = peers_on(chain, tmp_path, 3)
    chain.register(*sybils)
    for k, who in enumerate(sybils):
        chain.score(who, 0, {sybils[(k + j) % len(sybils)]: MAX for j in range(1, 21)})
    for i, c in enumerate(honest):
        c.report(RoundResult(0, f"p{i}", {"p0": 0.5, "p1": 0.5, "p2": 0.5}, ()))
    with caplog.at_level(logging.INFO, logger="genrl_swarm.coord.evm"):
        honest[0].finish_round(0)
    assert chain.read("roundStatus", 0)[0], caplog.text
    assert totals(chain, 3) == [0.0]  # scored by 20 of 83 voters: a minority moves nothing


def test_an_empty_report_is_refused_and_the_client_sends_none(tmp_path: Path) -> None:
    """An empty report used to make its sender a voter of nothing; now it is refused, and a peer
    with nothing to score sends nothing (and is not crashed)."""
    chain = Chain(accounts=3)
    _, p1, _ = peers_on(chain, tmp_path, 3)
    chain.reverts("EmptyReport", 1, "submitScores", 0, [], [])
    p1.report(RoundResult(0, "p1", {}, ()))
    assert chain.read("roundStatus", 0)[1] == 0


def test_a_failed_settle_never_crashes_the_peer_and_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    chain = Chain(accounts=2)
    p0, p1 = peers_on(chain, tmp_path, 2)
    for c, me in ((p0, "p0"), (p1, "p1")):
        c.report(RoundResult(0, me, {"p0": 0.5, "p1": 0.5}, ()))
    transact = p0.client.transact

    def node_down_for_settles(fn: Any) -> Any:
        if getattr(fn, "fn_name", "") == "finalizeRound":
            raise CoordinatorError("transaction finalizeRound failed: connection refused")
        return transact(fn)

    monkeypatch.setattr(p0.client, "transact", node_down_for_settles)
    with caplog.at_level(logging.WARNING, logger="genrl_swarm.coord.evm"):
        p0.finish_round(0)  # advances, then fails to settle: logged, not raised
    assert "round 0 not settled" in caplog.text and not chain.read("roundStatus", 0)[0]
    monkeypatch.setattr(p0.client, "transact", transact)
    p0.report(RoundResult(1, "p0", {"p0": 0.5, "p1": 0.5}, ()))
    p0.finish_round(1)
    assert chain.read("roundStatus", 0)[0] and totals(chain, 0, 1) == [0.5, 0.5]


def local_swarm(*peers: str) -> LocalCoordinator:
    c = LocalCoordinator(settle_wait=0)
    for p in peers:
        c.register(p)
    return c


def test_local_an_absent_peer_gains_nothing_from_its_friend() -> None:
    c = local_swarm("a", "b", "c", "d", "friend", "absent")
    for r in range(3):
        for me in ("a", "b", "c", "d"):
            c.report(RoundResult(r, me, dict.fromkeys("abcd", 0.5), ()))
        c.report(RoundResult(r, "friend", {"absent": MAX}, ()))
        c.finish_round(r)
    assert c.tally("absent") == (0.0, 0)
    assert c.tally("a")[0] == 1.5


def test_local_one_hostile_peer_of_three_cannot_move_the_honest_rewards() -> None:
    c = local_swarm("a", "b", "h")
    for r in range(3):
        for me in ("a", "b"):
            c.report(RoundResult(r, me, {"a": 0.5, "b": 0.5, "h": 0.0}, ()))
        c.report(RoundResult(r, "h", {"a": -MAX, "b": -MAX, "h": MAX}, ()))
        c.finish_round(r)
    assert sum(c.tally(p)[1] for p in "ab") == 3
    assert c.tally("a")[0] == c.tally("b")[0] == 1.5 and c.tally("h") == (0.0, 0)


def test_a_report_too_big_for_one_transaction_goes_in_parts(tmp_path: Path) -> None:
    """Parts in ascending order, each a vote from the first on; the round settles early only
    once the last part landed; a part sent again (a resumed peer) is AlreadyScored, taken as done."""
    chain = Chain(accounts=7)
    peers = peers_on(chain, tmp_path, 7)
    for c in peers:
        c.report_part = 3
    rewards = {f"p{j}": 0.25 for j in range(7)}
    for i, c in enumerate(peers[1:], start=1):
        c.report(RoundResult(0, f"p{i}", rewards, ()))
    ordered = sorted((chain.acct(j) for j in range(7)), key=lambda a: int(a, 16))
    own = peers[0].client  # account 0's client (one nonce tracker per account)
    part = chain.contract.functions.submitScoresPart
    own.transact(part(0, ordered[:3], [SCALE] * 3, False))
    own.transact(chain.contract.functions.advanceRound())
    assert chain.read("roundStatus", 0)[1] == 7 and not chain.read("canFinalize", 0)  # p0's report is not complete
    with pytest.raises(ContractRevert, match="AlreadyScored"):
        own.transact(part(0, ordered[:3], [SCALE] * 3, False))
    own.transact(part(0, ordered[3:], [SCALE] * 4, True))
    assert chain.read("canFinalize", 0)
    peers[1].report(RoundResult(0, "p1", rewards, ()))  # resumed: every part AlreadyScored, nothing raised
    peers[1].settle()
    assert totals(chain, *range(7)) == [0.25] * 7  # six votes of 0.25 against one of 1.0


def test_out_of_gas_is_not_mistaken_for_a_gateway_error() -> None:
    """An out-of-gas message quoting a storage key with "502" inside was retried 5 times with back-off."""
    from genrl_swarm.coord.evm import _transient

    assert not _transient(RuntimeError("Out of gas: SSTORE: 0xef8c[114914590352005028158] -> 1"))
    assert _transient(RuntimeError("HTTP 502 Bad Gateway")) and _transient(RuntimeError("429 Too Many Requests"))


def test_local_an_empty_report_is_no_vote(caplog: pytest.LogCaptureFixture) -> None:
    """An empty report (or one scoring only strangers) would otherwise be a NEUTRAL vote on
    every peer: a way to drag honest rewards toward 0 without scoring anyone."""
    c = local_swarm("a", "b", "c", "d")
    with caplog.at_level(logging.INFO, logger="genrl_swarm.coord.local"):
        c.report(RoundResult(0, "c", {"stranger": MAX}, ()))
        c.report(RoundResult(0, "a", {"a": 0.25}, ()))
    assert [r.getMessage() for r in caplog.records] == ["c reported no score of a registered peer for round 0: not a vote"]
    c.report(RoundResult(0, "b", {"a": 0.5}, ()))
    c.report(RoundResult(0, "d", {"a": 1.0}, ()))
    assert c.tally("a")[0] == 0.5  # three voters; had c voted, (0, 0, .25, .5, 1) -> 0.25
