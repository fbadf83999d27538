"""Integration: a ganache node (npm) on 127.0.0.1, the contract deployed with the CLI, and two
peers playing 3 rounds of the small game with the round advanced on chain."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
GANACHE = ROOT / "contracts" / "node_modules" / ".bin" / "ganache"
pytestmark = [
    pytest.mark.slow,  # ganache and the EVM
    pytest.mark.skipif(not GANACHE.exists() or shutil.which("node") is None, reason="needs Node and `npm install` in contracts/"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ganache(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    port, keys_file = free_port(), tmp_path / "keys.json"
    proc = subprocess.Popen(
        [str(GANACHE), "--server.host", "127.0.0.1", "--server.port", str(port), "--wallet.deterministic",
         "--wallet.totalAccounts", "3", "--wallet.accountKeysPath", str(keys_file), "--logging.quiet",
         # ganache 7.9.2 now and then never answers an eth_estimateGas that races the mining of
         # another peer's transaction (one 30 s stall per ~600 concurrent transactions, enough to
         # make a peer miss an exchange): one request at a time avoids it.
         "--chain.asyncRequestProcessing", "false"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not keys_file.exists() or not _answers(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ganache did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
            time.sleep(0.2)
        keys = list(json.loads(keys_file.read_text())["private_keys"].values())
        yield f"http://127.0.0.1:{port}", keys
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_ganache_reverts_decode_into_the_contracts_named_errors(ganache: tuple[str, list[str]]) -> None:
    """ganache answers eth_call with the revert bytes as ``data`` and eth_estimateGas (every
    transaction's first step) with ``data: {"result": ...}``: both decode into the error."""
    from genrl_swarm.coord.evm import ChainClient, ContractRevert, artifact, connect

    url, keys = ganache
    client = ChainClient(connect(url), keys[0], retries=1)
    contract = client.w3.eth.contract(address=client.deploy(num_stages=1), abi=artifact()["abi"])
    client.transact(contract.functions.registerPeer("peer-0"))
    with pytest.raises(ContractRevert) as sent:
        client.transact(contract.functions.registerPeer("peer-0"))
    assert (sent.value.name, sent.value.args_) == ("AlreadyRegistered", (client.address,))
    with pytest.raises(ContractRevert) as called:
        client.call(contract.functions.submitScores(5, [], []))
    assert (called.value.name, called.value.args_) == ("FutureRound", (5, 0))


def test_two_peers_three_rounds_on_chain(ganache: tuple[str, list[str]], tmp_path: Path) -> None:
    from eth_account import Account

    from genrl_swarm.config import load_recipe
    from genrl_swarm.coord.evm import ChainClient, artifact, connect
    from genrl_swarm.run.launcher import run_recipe

    url, keys = ganache
    for i, key in enumerate(keys[:2]):
        (tmp_path / f"peer-{i}.key").write_text(key)
    deploy = subprocess.run(
        [sys.executable, "-m", "genrl_swarm.cli", "chain", "deploy", "--rpc-url", url, "--key-file", str(tmp_path / "peer-0.key"), "--num-stages", "2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert deploy.returncode == 0, deploy.stderr
    address = deploy.stdout.strip().splitlines()[-1]

    cfg = load_recipe("bandit", [
        f"run.dir={tmp_path / 'run'}", "run.tensorboard=false", "run.console=false", "run.plot=false",
        "swarm.num_peers=2", "game.max_rounds=3", "game.mode=train",
        "coordinator=evm",  # the one override that moves to the chain
        f"coordinator.rpc_url={url}", f"coordinator.contract={address}",
        f"coordinator.key_file={tmp_path}/peer-${{peer.rank}}.key",
    ])  # fmt: skip
    summary = run_recipe(cfg)
    assert all([r.round for r in results] == [0, 1, 2] for results in summary.results.values())

    w3 = connect(url)
    client = ChainClient(w3, keys[2])
    fn = w3.eth.contract(address=address, abi=artifact()["abi"]).functions
    accounts = [Account.from_key(k).address for k in keys[:2]]
    assert client.call(fn.currentRound()) == 3  # advanced on chain by peer-0, the stage manager
    assert sorted(client.call(fn.registeredAccounts())) == sorted(accounts)  # one account per peer
    peer_of = dict(zip(accounts, client.call(fn.labels(accounts))))
    assert sorted(peer_of.values()) == sorted(summary.results)
    for r in range(3):
        assert all(client.call(fn.hasScored(r, a)) for a in accounts)  # every peer reported every round
        assert client.call(fn.roundStatus(r))[0]  # and every round is settled
    totals, wins = client.call(fn.totalRewards(accounts)), client.call(fn.winCounts(accounts))
    # Scores reach the chain through the accounts peers signed into their commitments.
    seen = {p: [(res.rewards, res.dropped) for res in results] for p, results in summary.results.items()}
    for account, total in zip(accounts, totals):
        peer = peer_of[account]
        (other,) = set(summary.results) - {peer}  # a peer's reward: what the other peer scored it
        assert all(peer in res.rewards for res in summary.results[other]), seen
        assert total == sum(round(res.rewards[peer] * 1e6) for res in summary.results[other]), seen
    assert sum(wins) == 3, seen  # one win per round
    assert summary.standings == {peer_of[a]: t / 1e6 for a, t in zip(accounts, totals)}
