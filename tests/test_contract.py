"""SwarmCoordinator on a real in-process EVM (eth-tester + py-evm): every function, every revert."""

from __future__ import annotations

import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

warnings.filterwarnings("ignore", category=DeprecationWarning)
web3 = pytest.importorskip("web3")
from web3.providers.eth_tester import EthereumTesterProvider  # noqa: E402

from genrl_swarm.coord.evm import ChainClient, ContractRevert, EvmCoordinator, artifact  # noqa: E402
from genrl_swarm.core.types import RoundResult  # noqa: E402

ROOT = Path(__file__).parents[1]


class Chain:
    """A fresh chain, the contract deployed by account 0 with 2 stages, a client per account."""

    def __init__(self) -> None:
        provider = EthereumTesterProvider()
        self.w3 = web3.Web3(provider)
        keys = provider.ethereum_tester.backend.account_keys
        self.clients = [ChainClient(self.w3, str(k)) for k in keys[:3]]
        self.address = self.clients[0].deploy(num_stages=2)
        self.contract = self.w3.eth.contract(address=self.address, abi=artifact()["abi"])

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


@pytest.fixture
def chain() -> Chain:
    return Chain()


def test_constructor_sets_roles_and_rejects_zero_stages(chain: Chain) -> None:
    me = chain.clients[0].address
    assert (chain.read("owner"), chain.read("stageManager"), chain.read("bootnodeManager")) == (me, me, me)
    assert chain.read("progress") == [0, 0, 2]
    with pytest.raises(ContractRevert) as caught:
        chain.clients[0].deploy(num_stages=0)
    assert caught.value.name == "InvalidStageCount"


def test_roles_only_owner_can_change_them(chain: Chain) -> None:
    other = chain.clients[1].address
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


def test_registry_first_account_owns_a_peer_id(chain: Chain) -> None:
    receipt = chain.send(1, "registerPeer", "peer-a")
    assert chain.events(receipt, "PeerRegistered")[0]["args"]["peerId"] == "peer-a"
    assert chain.read("accountOf", "peer-a") == chain.clients[1].address
    assert chain.read("peerIdsOf", chain.clients[1].address) == ["peer-a"]
    err = chain.reverts("PeerIdTaken", 2, "registerPeer", "peer-a")
    assert err.args_ == ("peer-a", chain.clients[1].address)
    chain.reverts("PeerIdTaken", 1, "registerPeer", "peer-a")  # double registration by the same account
    chain.reverts("EmptyPeerId", 1, "registerPeer", "")


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


def test_rewards_once_per_peer_round_stage(chain: Chain) -> None:
    chain.send(1, "registerPeer", "a")
    chain.send(0, "advanceRound")
    receipt = chain.send(1, "submitReward", 1, 0, "a", 750_000)
    assert chain.events(receipt, "RewardSubmitted")[0]["args"]["reward"] == 750_000
    chain.send(1, "submitReward", 0, 1, "a", -250_000)  # a past round, another stage, a negative reward
    assert chain.read("totalRewards", ["a", "nobody"]) == [500_000, 0]
    assert chain.read("hasSubmittedReward", 1, 0, "a") and not chain.read("hasSubmittedReward", 1, 1, "a")
    chain.reverts("RewardAlreadySubmitted", 1, "submitReward", 1, 0, "a", 1)
    assert chain.reverts("FutureRound", 1, "submitReward", 2, 0, "a", 1).args_ == (2, 1)
    chain.reverts("StageOutOfRange", 1, "submitReward", 1, 2, "a", 1)
    chain.reverts("NotPeerAccount", 2, "submitReward", 1, 1, "a", 1)  # someone else's peer id
    chain.reverts("NotPeerAccount", 1, "submitReward", 1, 1, "unregistered", 1)


def test_one_winner_vote_per_peer_and_round(chain: Chain) -> None:
    chain.send(1, "registerPeer", "a")
    chain.send(2, "registerPeer", "b")
    receipt = chain.send(1, "submitWinners", 0, "a", ["b"])
    assert chain.events(receipt, "WinnersVoted")[0]["args"]["winners"] == ["b"]
    chain.send(2, "submitWinners", 0, "b", ["b", "a"])
    assert chain.read("winCounts", ["a", "b"]) == [1, 2]
    assert chain.read("roundVotes", 0, ["a", "b"]) == [1, 2]
    assert chain.read("hasVoted", 0, "a")
    chain.reverts("AlreadyVoted", 1, "submitWinners", 0, "a", ["a"])
    chain.reverts("NoWinners", 1, "submitWinners", 0, "a", [])
    chain.reverts("FutureRound", 1, "submitWinners", 5, "a", ["a"])
    chain.reverts("NotPeerAccount", 2, "submitWinners", 0, "a", ["a"])


def test_bootnodes(chain: Chain) -> None:
    addrs = ["/ip4/127.0.0.1/tcp/4001/p2p/QmA", "/ip4/127.0.0.1/tcp/4002/p2p/QmB"]
    receipt = chain.send(0, "addBootnodes", addrs)
    assert chain.events(receipt, "BootnodesChanged")[0]["args"]["count"] == 2
    assert chain.read("bootnodes") == addrs
    chain.reverts("NotBootnodeManager", 1, "addBootnodes", addrs)
    chain.reverts("NotBootnodeManager", 1, "clearBootnodes")
    chain.send(0, "clearBootnodes")
    assert chain.read("bootnodes") == []


def test_evm_coordinator_plays_the_referee(chain: Chain, tmp_path: Path) -> None:
    keys = chain.w3.provider.ethereum_tester.backend.account_keys
    files = []
    for i in (0, 1):
        files.append(tmp_path / f"k{i}")
        files[-1].write_text(str(keys[i]))
    manager = EvmCoordinator(contract=chain.address, key_file=str(files[0]), w3=chain.w3)
    other = EvmCoordinator(contract=chain.address, key_file=str(files[1]), w3=chain.w3)
    manager.register("p0")
    manager.register("p0")  # again after a restart: fine
    other.register("p1")
    with pytest.raises(Exception, match="belongs to"):
        EvmCoordinator(contract=chain.address, key_file=str(files[1]), w3=chain.w3).register("p0")
    result = RoundResult(0, "p1", {"p0": 0.5, "p1": 0.25}, ("p0",))
    other.report(result)
    other.report(result)  # a resumed peer repeating a round: idempotent
    other.finish_round(0)  # not the stage manager: nothing happens
    assert other.current_round() == 0
    manager.report(RoundResult(0, "p0", {"p0": 0.5, "p1": 0.25}, ("p0",)))
    manager.finish_round(0)
    assert other.current_round() == 1
    assert manager.standings() == {"p0": 0.5, "p1": 0.25}
    assert chain.read("winCounts", ["p0"]) == [2]


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


@pytest.mark.skipif(not (ROOT / "contracts" / "node_modules" / ".bin" / "solcjs").exists() or shutil.which("node") is None,
                    reason="Node and contracts/node_modules (npm install) are needed to recompile")  # fmt: skip
def test_committed_artifact_matches_the_source() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "compile_contract.py"), "--check"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
