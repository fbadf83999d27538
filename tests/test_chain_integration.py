"""Integration: a ganache node (npm) on 127.0.0.1, the contract deployed with the CLI, and two
peers playing 3 rounds of the small game with the round advanced on chain."""

from __future__ import annotations

import json
import os
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
pytestmark = pytest.mark.skipif(
    not GANACHE.exists() or shutil.which("node") is None, reason="needs Node and `npm install` in contracts/"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ganache(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    port, keys_file = free_port(), tmp_path / "keys.json"
    proc = subprocess.Popen(
        [str(GANACHE), "--server.host", "127.0.0.1", "--server.port", str(port), "--wallet.deterministic",
         "--wallet.totalAccounts", "3", "--wallet.accountKeysPath", str(keys_file), "--logging.quiet"],
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


def test_two_peers_three_rounds_on_chain(ganache: tuple[str, list[str]], tmp_path: Path) -> None:
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
    assert [r.round for r in summary.results["peer-1"]] == [0, 1, 2]

    w3 = connect(url)
    client = ChainClient(w3, keys[2])
    contract = w3.eth.contract(address=address, abi=artifact()["abi"])
    fn = contract.functions
    assert client.call(fn.currentRound()) == 3  # advanced on chain by peer-0, the stage manager
    for r in range(3):
        assert all(client.call(fn.hasSubmittedReward(r, 0, p)) and client.call(fn.hasVoted(r, p)) for p in ("peer-0", "peer-1"))
    totals = client.call(fn.totalRewards(["peer-0", "peer-1"]))
    for peer, total in zip(("peer-0", "peer-1"), totals):
        own = sum(res.rewards[peer] for res in summary.results[peer])
        assert abs(total / 1e6 - own) < 1e-5
    assert sum(client.call(fn.winCounts(["peer-0", "peer-1"]))) == 2 * 3  # one vote per peer per round
    assert summary.standings.keys() == {"peer-0", "peer-1"}
