"""SwarmCoordinator on a real in-process EVM (eth-tester + py-evm): every function, every revert,
and the attacks on honest rewards (each test below fails on the contract before issue 10)."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

warnings.filterwarnings("ignore", category=DeprecationWarning)
web3 = pytest.importorskip("web3")
from web3.providers.eth_tester import EthereumTesterProvider  # noqa: E402

from genrl_swarm.coord.chain_rewards import chain_median, next_page  # noqa: E402
from genrl_swarm.coord.evm import ChainClient, ContractRevert, EvmCoordinator, artifact  # noqa: E402
from genrl_swarm.core.types import RoundResult  # noqa: E402

pytestmark = pytest.mark.slow  # the contract on an in-process EVM

ROOT = Path(__file__).parents[1]
SCALE = 1_000_000
MAX_SCORE = 10**6 * SCALE


class Chain:
    """A fresh chain, the contract deployed by account 0 with 2 stages, a client per account."""

    def __init__(self, accounts: int = 6, block_gas: int | None = None) -> None:
        from eth.estimators.gas import binary_gas_search
        from eth_tester import EthereumTester, PyEVMBackend

        genesis = PyEVMBackend.generate_genesis_params({"gas_limit": block_gas}) if block_gas else None
        funded = PyEVMBackend.generate_genesis_state(num_accounts=max(accounts, 10))  # funded at genesis: no transfers
        provider = EthereumTesterProvider(EthereumTester(PyEVMBackend(genesis_parameters=genesis, genesis_state=funded)))
        self.w3 = web3.Web3(provider)
        tester = provider.ethereum_tester
        # Gas estimates at the block limit: one execution per estimate instead of ~14 (a revert
        # or running out of the block's gas still raises while estimating, as on a node).
        block = block_gas or 10**12
        tester.backend.chain.gas_estimator = lambda state, tx: min(binary_gas_search(state, tx, tolerance=10**12), block)
        self.keys = [str(k) for k in tester.backend.account_keys][:accounts]
        self.clients = [ChainClient(self.w3, k) for k in self.keys]
        self.address = self.clients[0].deploy(num_stages=2)
        self.contract = self.w3.eth.contract(address=self.address, abi=artifact()["abi"])

    def bulk(self, calls: Sequence[tuple[int, str, tuple[Any, ...]]], batch: int = 40, gas: int = 600_000) -> list[int]:
        """Many transactions, ``batch`` to a block (one py-evm ``mine_all`` each: a thousand
        voters' reports in a minute, not ten): (who, function, args) each; the gas each used.
        Raises on the first that failed. The calldata is the ABI encoding ``encode_abi`` gives,
        from a selector and argument types looked up once per function, and each sender's nonce
        is read once, from the chain's state (web3's lookups were a fifth of a 1,000-voter test)."""
        import os

        from eth_abi import encode
        from eth_utils import function_abi_to_4byte_selector, to_canonical_address

        chain = self.w3.provider.ethereum_tester.backend.chain
        chain_id = self.w3.eth.chain_id
        functions = {f["name"]: f for f in self.contract.abi if f.get("type") == "function"}
        heads: dict[str, tuple[bytes, list[str]]] = {}
        nonces: dict[int, int] = {}
        used: list[int] = []
        for start in range(0, len(calls), batch):
            signed = []
            state = chain.get_vm().state
            for who, name, args in calls[start : start + batch]:
                if name not in heads:
                    heads[name] = (function_abi_to_4byte_selector(functions[name]), [i["type"] for i in functions[name]["inputs"]])
                selector, types = heads[name]
                if who not in nonces:
                    nonces[who] = state.get_nonce(to_canonical_address(self.acct(who)))
                nonce = nonces[who]
                nonces[who] = nonce + 1
                tx = {"to": self.address, "data": "0x" + (selector + encode(types, list(args))).hex(), "gas": gas, "nonce": nonce,
                      "chainId": chain_id, "maxFeePerGas": 10**10, "maxPriorityFeePerGas": 1}  # fmt: skip
                raw = self.clients[who].account.sign_transaction(tx).raw_transaction
                signed.append(chain.get_vm().get_transaction_builder().decode(bytes(raw)))
            _, receipts, computations = chain.mine_all(signed, mix_hash=os.urandom(32))
            for computation in computations:
                if computation.is_error:
                    raise computation.error
            used += [r.gas_used - (receipts[i - 1].gas_used if i else 0) for i, r in enumerate(receipts)]
        for who in nonces:
            self.clients[who]._nonce = None  # read again at the next transaction
        return used

    def acct(self, who: int) -> str:
        return self.clients[who].address

    def send(self, who: int, name: str, *args: Any) -> Any:
        return self.clients[who].transact(getattr(self.contract.functions, name)(*args))

    def read(self, name: str, *args: Any) -> Any:
        return self.clients[0].call(getattr(self.contract.functions, name)(*args))

    def reverts(self, error: str, who: int, name: str, *args: Any) -> ContractRevert:
        with pytest.raises(ContractRevert) as caught:
            self.send(who, name, *args)
        assert caught.value.name == error
        return caught.value

    def events(self, receipt: Any, name: str) -> list[Any]:
        return list(getattr(self.contract.events, name)().process_receipt(receipt))

    def register(self, *who: int) -> None:
        for i in who:
            self.send(i, "registerPeer", f"peer-{i}")

    def score(self, who: int, round: int, scores: dict[int, float]) -> Any:
        """``who`` scores accounts (by index) for ``round``, sorted as the contract wants."""
        pairs = sorted(((self.acct(i), round_fixed(v)) for i, v in scores.items()), key=lambda p: int(p[0], 16))
        return self.send(who, "submitScores", round, [a for a, _ in pairs], [s for _, s in pairs])

    def settle(self, round: int, who: int = 0, page: int = 64) -> Any:
        """``who`` settles the next page of ``round`` with the medians the client computes."""
        start, medians = next_page(self.clients[0], self.contract, round, page)
        return self.send(who, "finalizeRound", round, start, medians)

    def reward(self, round: int, who: int) -> tuple[int, int]:
        """(``who``'s reward for ``round`` as the contract verifies it, how many scored it)."""
        median = chain_median(self.clients[0], self.contract, round, self.acct(who))
        assert self.read("isMedian", round, self.acct(who), median)
        return median, len(self.read("votes", round, self.acct(who))[0])

    def totals(self, *who: int) -> list[int]:
        return list(self.read("totalRewards", [self.acct(i) for i in who]))

    def wins(self, *who: int) -> list[int]:
        return list(self.read("winCounts", [self.acct(i) for i in who]))


def round_fixed(value: float) -> int:
    return round(value * SCALE)


@pytest.fixture
def chain() -> Chain:
    return Chain()


def test_constructor_sets_roles_and_rejects_zero_stages(chain: Chain) -> None:
    me = chain.acct(0)
    assert (chain.read("owner"), chain.read("stageManager"), chain.read("bootnodeManager")) == (me, me, me)
    assert chain.read("progress") == [0, 0, 2]
    assert (chain.read("REWARD_SCALE"), chain.read("MAX_SCORE")) == (SCALE, MAX_SCORE)
    with pytest.raises(ContractRevert) as caught:
        chain.clients[0].deploy(num_stages=0)
    assert caught.value.name == "InvalidStageCount"


def test_roles_only_owner_can_change_them(chain: Chain) -> None:
    other = chain.acct(1)
    for fn in ("transferOwnership", "setStageManager", "setBootnodeManager"):
        assert chain.reverts("NotOwner", 1, fn, other).args_ == (other,)
        chain.reverts("ZeroAddress", 0, fn, "0x" + "00" * 20)
    receipt = chain.send(0, "setStageManager", other)
    assert chain.events(receipt, "StageManagerChanged")[0]["args"]["newManager"] == other
    chain.reverts("NotStageManager", 0, "advanceRound")
    chain.send(1, "advanceRound")
    chain.send(0, "setBootnodeManager", other)
    chain.reverts("NotBootnodeManager", 0, "addBootnodes", ["/ip4/127.0.0.1/tcp/1"])
    chain.send(0, "transferOwnership", other)
    assert chain.read("owner") == other
    chain.reverts("NotOwner", 0, "setStageManager", other)


def test_a_peer_id_cannot_be_squatted(chain: Chain) -> None:
    """An attacker registering the victim's peer id first takes nothing from the victim: the id
    is a label, the victim registers and is credited as its own account."""
    receipt = chain.send(2, "registerPeer", "victim")  # the squatter is first
    assert chain.events(receipt, "PeerRegistered")[0]["args"]["peerId"] == "victim"
    chain.send(1, "registerPeer", "victim")  # old contract: PeerIdTaken, the victim locked out
    chain.register(3)
    chain.score(3, 0, {1: 0.75, 2: 0.0})
    chain.send(0, "advanceRound")
    chain.send(0, "advanceRound")
    chain.settle(0)
    assert chain.totals(1, 2) == [750_000, 0]
    assert chain.read("labels", [chain.acct(1), chain.acct(2)]) == ["victim", "victim"]


def test_one_account_registers_once_so_it_has_one_vote(chain: Chain) -> None:
    chain.send(1, "registerPeer", "a")
    assert chain.reverts("AlreadyRegistered", 1, "registerPeer", "b").args_ == (chain.acct(1),)  # old contract: a second id
    assert chain.read("registeredAccounts") == [chain.acct(1)]
    assert chain.read("isRegistered", chain.acct(1)) and not chain.read("isRegistered", chain.acct(2))
    chain.reverts("EmptyPeerId", 2, "registerPeer", "")
    assert chain.reverts("LabelTooLong", 2, "registerPeer", "x" * 129).args_ == (129, 128)
    chain.register(2)
    chain.score(1, 0, {2: 1.0})
    chain.reverts("AlreadyScored", 1, "submitScores", 0, [chain.acct(2)], [1])  # one submission per round
    assert chain.read("hasScored", 0, chain.acct(1)) and not chain.read("hasScored", 0, chain.acct(2))


def test_scores_must_be_bounded_for_others_and_for_an_open_round(chain: Chain) -> None:
    chain.register(1, 2, 3)
    a2, a3 = chain.acct(2), chain.acct(3)
    assert chain.reverts("ScoreOutOfRange", 1, "submitScores", 0, [a2], [MAX_SCORE + 1]).args_ == (a2, MAX_SCORE + 1)
    chain.reverts("ScoreOutOfRange", 1, "submitScores", 0, [a2], [-MAX_SCORE - 1])
    chain.reverts("ScoreOutOfRange", 1, "submitScores", 0, [a2], [2**255 - 1])
    assert chain.reverts("FutureRound", 1, "submitScores", 1, [a2], [1]).args_ == (1, 0)
    chain.reverts("NotRegistered", 4, "submitScores", 0, [a2], [1])  # the caller
    chain.reverts("NotRegistered", 1, "submitScores", 0, [chain.acct(4)], [1])  # the scored peer
    chain.reverts("LengthMismatch", 1, "submitScores", 0, [a2, a3], [1])
    low, high = sorted((a2, a3), key=lambda a: int(a, 16))
    assert chain.reverts("UnsortedPeers", 1, "submitScores", 0, [high, low], [1, 1]).args_ == (1,)
    chain.send(0, "advanceRound")
    chain.send(0, "advanceRound")
    assert chain.reverts("RoundClosed", 1, "submitScores", 0, [a2], [1]).args_ == (0, 2)  # old contract: any past round
    chain.score(1, 1, {2: MAX_SCORE / SCALE, 3: -MAX_SCORE / SCALE})  # the grace round and the bounds themselves
    chain.reverts("EmptyReport", 2, "submitScores", 2, [], [])  # old contract: a vote of NEUTRAL for everyone
    chain.score(2, 2, {2: 0.5})  # its own score: one vote among the round's voters
    assert chain.read("roundStatus", 2)[1] == 1


def test_a_peer_listed_500_times_is_one_duplicate_and_a_round_one_win(chain: Chain) -> None:
    chain.register(1, 2, 3)
    err = chain.reverts("DuplicatePeer", 1, "submitScores", 0, [chain.acct(2)] * 500, [MAX_SCORE] * 500)
    assert err.args_ == (chain.acct(2),)
    for who, scores in ((1, {2: 0.9, 3: 0.1}), (2, {1: 0.2, 3: 0.8}), (3, {1: 0.3, 2: 0.7})):
        chain.score(who, 0, scores)
    chain.send(0, "advanceRound")
    receipt = chain.settle(0)
    assert chain.events(receipt, "RoundFinalized")[0]["args"]["winner"] == chain.acct(2)  # medians 0.2, 0.7, 0.1
    assert chain.wins(1, 2, 3) == [0, 1, 0]
    assert chain.read("roundStatus", 0) == [True, 3, chain.acct(2)]
    chain.reverts("AlreadyFinalized", 1, "finalizeRound", 0, 0, [])  # settled once
    chain.reverts("AlreadyFinalized", 1, "submitScores", 0, [chain.acct(2)], [1])


def test_reward_is_the_median_of_the_others_so_one_outlier_moves_nothing(chain: Chain) -> None:
    chain.register(1, 2, 3, 4, 5)
    chain.score(2, 0, {1: 0.5})
    chain.score(3, 0, {1: 0.6})
    chain.score(4, 0, {1: 1e6})  # a friend's outlier
    chain.score(5, 0, {1: 0.4})
    assert chain.reward(0, 1) == (500_000, 4)  # median of 0.4, 0.5, 0.6, 1e6 and NEUTRAL
    chain.send(0, "advanceRound")
    chain.score(2, 1, {1: 0.5})
    chain.score(3, 1, {1: 1e6})  # with two scorers the lower one counts: a lone friend cannot inflate
    chain.send(0, "advanceRound")
    chain.send(0, "advanceRound")
    chain.settle(0)
    chain.settle(1)
    assert chain.totals(1) == [1_000_000]
    assert chain.reward(7, 1) == (0, 0)


def test_the_on_chain_reward_is_round_rewards_of_any_reports() -> None:
    """The contract and coord/scores.py agree on random rounds: ties, odd and even voter counts,
    voters that scored someone else (a NEUTRAL vote each), own scores (the tie-break) and
    reports of oneself alone (a vote on oneself only). The contract verifies the median
    ``round_rewards`` gives and refuses its neighbours."""
    import random

    from genrl_swarm.coord.scores import round_rewards

    rng, chain = random.Random(7), Chain(accounts=10)
    chain.register(*range(10))
    for r in range(12):
        pool = rng.choice([[0, 1], [-3, 0, 2, 2, 5], list(range(-50, 50))])  # many ties, or few
        reports: dict[int, dict[int, int]] = {}
        for who in rng.sample(range(10), rng.randint(1, 10)):
            shape = rng.random()
            scored = [who] if shape < 0.25 else rng.sample(range(10), rng.randint(1, 5))
            if shape > 0.5 and who not in scored:
                scored.append(who)
            reports[who] = {peer: rng.choice(pool) * SCALE // 10 for peer in scored}
            pairs = sorted(((chain.acct(p), v) for p, v in reports[who].items()), key=lambda x: int(x[0], 16))
            chain.send(who, "submitScores", r, [a for a, _ in pairs], [v for _, v in pairs])
        want = {peer: int(reward) for peer, reward in round_rewards(reports).items()}  # NEUTRAL is 0.0
        for peer, reward in want.items():
            assert chain.reward(r, peer) == (reward, sum(peer in s for s in reports.values())), (r, peer, reports)
            for wrong in (reward - 1, reward + 1):
                assert not chain.read("isMedian", r, chain.acct(peer), wrong)
        chain.send(0, "advanceRound")


def test_a_round_settles_only_when_no_score_can_change_it(chain: Chain) -> None:
    chain.register(1, 2, 3)
    chain.score(1, 0, {2: 1.0})
    assert chain.reverts("RoundOpen", 0, "finalizeRound", 0, 0, []).args_ == (0, 0)  # the current round
    chain.send(0, "advanceRound")
    assert not chain.read("canFinalize", 0)  # accounts 2 and 3 may still report it
    chain.reverts("RoundOpen", 0, "finalizeRound", 0, 0, [])
    chain.score(2, 0, {1: 0.5})
    chain.score(3, 0, {1: 0.5, 2: 0.0})
    assert chain.read("canFinalize", 0)  # every registered account reported: settle early
    chain.settle(0, 5)  # anyone may settle, registered or not
    assert chain.totals(1, 2) == [500_000, 0] and chain.wins(1, 2) == [1, 0]
    chain.score(1, 1, {2: 1.0})  # round 1: only account 1 reports; settles after its grace round
    chain.send(0, "advanceRound")
    assert not chain.read("canFinalize", 1)
    chain.send(0, "advanceRound")
    assert chain.read("canFinalize", 1)
    chain.settle(1)
    assert chain.totals(2) == [1_000_000] and chain.wins(2) == [1]


def test_ties_go_to_one_peer_by_a_per_round_hash(chain: Chain) -> None:
    chain.register(1, 2, 3)
    winners = []
    for r in range(6):
        for who in (1, 2, 3):
            chain.score(who, r, {1: 0.5, 2: 0.5})
        chain.send(0, "advanceRound")
        chain.settle(r)
        winners.append(chain.read("roundStatus", r)[2])
    assert set(winners) == {chain.acct(1), chain.acct(2)}  # one winner a round, not always the same
    assert sum(chain.wins(1, 2)) == 6


def test_stages_cycle_into_rounds(chain: Chain) -> None:
    chain.send(0, "advanceStage")
    assert chain.read("progress")[:2] == [0, 1]
    receipt = chain.send(0, "advanceStage")
    assert chain.read("progress")[:2] == [1, 0]
    assert chain.events(receipt, "RoundAdvanced")[0]["args"]["round"] == 1
    chain.send(0, "advanceRound")
    assert chain.read("currentRound") == 2
    chain.reverts("NotStageManager", 1, "advanceStage")
    chain.reverts("NotStageManager", 1, "advanceRound")


def test_bootnodes(chain: Chain) -> None:
    addrs = ["/ip4/127.0.0.1/tcp/4001/p2p/QmA", "/ip4/127.0.0.1/tcp/4002/p2p/QmB"]
    receipt = chain.send(0, "addBootnodes", addrs)
    assert chain.events(receipt, "BootnodesChanged")[0]["args"]["count"] == 2
    assert chain.read("bootnodes") == addrs
    chain.reverts("NotBootnodeManager", 1, "addBootnodes", addrs)
    chain.reverts("NotBootnodeManager", 1, "clearBootnodes")
    chain.send(0, "clearBootnodes")
    assert chain.read("bootnodes") == []


def coordinators(chain: Chain, tmp_path: Path, n: int) -> list[EvmCoordinator]:
    out = []
    for i in range(n):
        (tmp_path / f"k{i}").write_text(chain.keys[i])
        out.append(EvmCoordinator(contract=chain.address, key_file=str(tmp_path / f"k{i}"), w3=chain.w3))
    return out


def test_evm_coordinator_plays_the_referee(chain: Chain, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    manager, other, third = coordinators(chain, tmp_path, 3)
    assert manager.account == chain.acct(0)
    manager.register("p0")
    manager.register("p0")  # again after a restart: fine
    other.register("p1")
    third.register("p2")
    signed = {"p0": manager.account, "p1": other.account, "p2": third.account}
    for c in (manager, other, third):
        c.learn_accounts({**signed, "evil": other.account, "p9": chain.acct(5)})  # claims nobody confirmed
    result = RoundResult(0, "p1", {"p0": 0.5, "p1": 1e6, "p2": 0.25, "evil": 1.0, "p9": 1.0}, ("p1",) * 500)
    with caplog.at_level(logging.DEBUG, logger="genrl_swarm.coord.evm"):
        other.report(result)
    assert "no confirmed account for evil, p9" in caplog.text
    other.report(result)  # a resumed peer repeating a round: idempotent
    other.finish_round(0)  # not the stage manager: nothing happens
    assert other.current_round() == 0
    manager.report(RoundResult(0, "p0", {"p0": 1e6, "p1": 0.25, "p2": 0.75}, ()))
    manager.finish_round(0)  # advances; round 0 waits for p2's report
    assert other.current_round() == 1 and not chain.read("roundStatus", 0)[0]
    third.report(RoundResult(0, "p2", {"p0": 0.0, "p1": 0.75, "p2": 1e6}, ()))  # in its grace round
    third.finish_round(0)  # every account reported round 0: third settles it
    assert chain.read("roundStatus", 0)[0]
    # three voters, each claiming 1e6 for itself: p0: median of (0.5, 1e6, 0.0) = 0.5;
    # p1: of (1e6, 0.25, 0.75) = 0.75; p2: of (0.25, 0.75, 1e6) = 0.75
    assert manager.standings() == {"p0": 0.5, "p1": 0.75, "p2": 0.75}
    assert sorted([other.tally("p1"), third.tally("p2")]) == [(0.75, 0), (0.75, 1)]  # one win, by tie-break
    assert manager.tally("evil") == (0.0, 0)
    assert chain.read("totalRewards", [chain.acct(5)]) == [0]


def test_evm_coordinator_reports_late_rounds_without_failing(chain: Chain, tmp_path: Path) -> None:
    manager, other = coordinators(chain, tmp_path, 2)
    manager.register("p0")
    other.register("p1")
    for r in range(3):
        manager.report(RoundResult(r, "p0", {}, ()))
        manager.finish_round(r)
    other.report(RoundResult(0, "p1", {}, ()))  # round 0 is closed at round 3: logged, not raised
    assert not chain.read("hasScored", 0, other.account)
    assert chain.read("roundStatus", 1)[0]  # settled by the manager once its grace round was over


def test_a_transaction_that_reverts_once_mined_is_named(chain: Chain) -> None:
    """Two peers settle the same round: the second's estimate passed, its transaction reverts in
    the block; the error is named (and EvmCoordinator takes AlreadyFinalized as done)."""
    chain.register(1, 2)
    chain.send(0, "advanceRound")
    chain.send(0, "advanceRound")
    fn = chain.contract.functions.finalizeRound(0, 0, [])  # an empty round: one empty page

    class EstimatedBeforeTheOtherLanded:
        fn_name = "finalizeRound"

        def build_transaction(self, tx: dict[str, Any]) -> Any:
            return fn.build_transaction({**tx, "gas": 300_000})  # as estimated a moment earlier

        def call(self, *args: Any, **kwargs: Any) -> Any:
            return fn.call(*args, **kwargs)

    chain.settle(0, 2)
    nonce = chain.w3.eth.get_transaction_count(chain.acct(1))
    with pytest.raises(ContractRevert) as caught:
        chain.clients[1].transact(EstimatedBeforeTheOtherLanded())
    assert (caught.value.name, caught.value.args_) == ("AlreadyFinalized", (0,))
    assert chain.w3.eth.get_transaction_count(chain.acct(1)) == nonce + 1  # it was mined, and failed


def test_finalize_gas_stays_within_a_block_for_tens_of_peers() -> None:
    chain = Chain(accounts=10)
    peers = range(10)
    chain.register(*peers)
    for who in peers:
        chain.score(who, 0, {i: (i * 7 + who) % 10 / 10 for i in peers if i != who})
    chain.send(0, "advanceRound")
    receipt = chain.settle(0)
    assert receipt["gasUsed"] < 600_000


def test_private_key_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genrl_swarm.coord.evm import CoordinatorError, load_private_key

    monkeypatch.delenv("GENRL_SWARM_PRIVATE_KEY", raising=False)
    with pytest.raises(CoordinatorError, match="no private key"):
        load_private_key(None)
    with pytest.raises(CoordinatorError, match="cannot read"):
        load_private_key(str(tmp_path / "missing"))
    (tmp_path / "short").write_text("0x1234")
    with pytest.raises(CoordinatorError, match="not 32 hex bytes"):
        load_private_key(str(tmp_path / "short"))


def test_revert_data_is_found_in_every_node_error_shape() -> None:
    from genrl_swarm.coord.evm import decode_revert

    class RpcError(Exception):
        def __init__(self, data: object) -> None:
            super().__init__("execution reverted")
            self.data = data

    selector = web3.Web3.keccak(text="AlreadyFinalized(uint256)")[:4].hex().removeprefix("0x")
    payload = "0x" + selector + f"{7:064x}"
    shapes = [
        payload,  # geth, anvil, hardhat, ganache's eth_call
        {"hash": None, "programCounter": 1547, "result": payload, "reason": None, "message": "revert"},  # ganache 7 estimateGas
        {"0x" + "ab" * 32: {"error": "revert", "program_counter": 9, "return": payload}, "stack": "...", "name": "c"},  # ganache 6
    ]
    for data in shapes:
        decoded = decode_revert(RpcError(data))
        assert decoded is not None and (decoded.name, decoded.args_) == ("AlreadyFinalized", (7,)), data
    assert decode_revert(RpcError({"message": "revert"})) is None


@pytest.mark.skipif(not (ROOT / "contracts" / "node_modules" / ".bin" / "solcjs").exists() or shutil.which("node") is None,
                    reason="Node and contracts/node_modules (npm install) are needed to recompile")  # fmt: skip
def test_committed_artifact_matches_the_source() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "compile_contract.py"), "--check"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
