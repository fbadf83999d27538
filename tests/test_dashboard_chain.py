"""The on-chain leaderboard the dashboard shows: read-only calls to a SwarmCoordinator on an
in-process EVM, best first, labels as registered (untrusted), an unreachable node as an error."""

from __future__ import annotations

import warnings

import pytest

warnings.filterwarnings("ignore", category=DeprecationWarning)
web3 = pytest.importorskip("web3")
from web3.providers.eth_tester import EthereumTesterProvider  # noqa: E402

from genrl_swarm.coord.chain_rewards import next_page  # noqa: E402
from genrl_swarm.coord.evm import ChainClient, artifact  # noqa: E402
from genrl_swarm.dashboard.chain import ChainStandings  # noqa: E402

SCALE = 1_000_000
LABELS = ["peer-a", "<img src=x onerror=alert(1)>", "peer-c"]


def test_standings_come_from_the_contract_best_first() -> None:
    w3 = web3.Web3(EthereumTesterProvider())
    keys = [str(k) for k in w3.provider.ethereum_tester.backend.account_keys[:3]]
    clients = [ChainClient(w3, k) for k in keys]
    address = clients[0].deploy(num_stages=1)
    contract = w3.eth.contract(address=address, abi=artifact()["abi"])
    for client, label in zip(clients, LABELS):
        client.transact(contract.functions.registerPeer(label))
    given = {0: 0.2, 1: 0.9, 2: 0.5}  # everyone gives each other peer the same score: its median
    for i, client in enumerate(clients):
        others = sorted((clients[j].address for j in given if j != i), key=lambda a: int(a, 16))
        scores = [round(given[next(j for j, c in enumerate(clients) if c.address == a)] * SCALE) for a in others]
        client.transact(contract.functions.submitScores(0, others, scores))
    clients[0].transact(contract.functions.advanceRound())
    clients[0].transact(contract.functions.finalizeRound(0, *next_page(clients[0], contract, 0, 64)))

    chain = ChainStandings("in-process", address, w3=w3).read()
    assert chain["error"] is None and (chain["round"], chain["stage"], chain["stages"]) == (1, 0, 1)
    assert [(r["id"], r["cumulative"], r["wins"]) for r in chain["rows"]] == [(LABELS[1], 0.9, 1), ("peer-c", 0.5, 0), ("peer-a", 0.2, 0)]
    assert chain["rows"][0]["account"] == clients[1].address


def test_an_unreachable_node_is_an_error_on_the_page_not_a_crash() -> None:
    chain = ChainStandings("http://127.0.0.1:9", "0x" + "11" * 20).read()
    assert chain["error"] and "rows" not in chain
