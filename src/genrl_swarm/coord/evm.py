"""EvmCoordinator: the SwarmCoordinator contract through web3.py, against any JSON-RPC URL.

The private key comes from a file or an environment variable, never from a recipe. Writes are
signed locally with a tracked nonce and retried on transient RPC errors; reverts are decoded
into the contract's custom errors (``ContractRevert.name``) and never retried.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from genrl_swarm.coord.errors import CoordinatorError
from genrl_swarm.core.interfaces import Coordinator
from genrl_swarm.core.types import RoundResult

log = logging.getLogger(__name__)
ARTIFACT = Path(__file__).with_name("SwarmCoordinator.json")
REWARD_SCALE = 1_000_000  # rewards are floats here, fixed-point integers on chain
KEY_ENV, RPC_ENV, CONTRACT_ENV = "GENRL_SWARM_PRIVATE_KEY", "GENRL_SWARM_RPC_URL", "GENRL_SWARM_CONTRACT"
T = TypeVar("T")


class ContractRevert(CoordinatorError):
    """The contract refused a call with one of its custom errors."""

    def __init__(self, name: str, args: Sequence[Any]) -> None:
        super().__init__(f"SwarmCoordinator reverted: {name}{tuple(args)!r}")
        self.name, self.args_ = name, tuple(args)


@cache
def artifact() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(ARTIFACT.read_text())
    return data


@cache
def _error_table() -> dict[bytes, tuple[str, list[str]]]:
    from eth_utils import keccak

    table = {}
    for item in artifact()["abi"]:
        if item["type"] == "error":
            types = [i["type"] for i in item["inputs"]]
            table[keccak(text=f"{item['name']}({','.join(types)})")[:4]] = (item["name"], types)
    return table


def revert_data(error: BaseException) -> bytes | None:
    """The raw revert bytes of a failed call: ``data`` from a JSON-RPC node, or, from
    eth-tester, the bytes of the EVM's Revert somewhere in the exception's chain."""
    seen: BaseException | None = error
    while seen is not None:
        data = getattr(seen, "data", None)
        if isinstance(data, str) and data.startswith("0x") and len(data) >= 10:
            return bytes.fromhex(data[2:])
        first = seen.args[0] if seen.args else None
        if isinstance(first, BaseException) and first.args:
            first = first.args[0]
        if isinstance(first, bytes) and len(first) >= 4:
            return first
        if isinstance(first, str) and "execution reverted: b" in first:
            value = ast.literal_eval(first.partition("execution reverted: ")[2])
            if isinstance(value, bytes):
                return value
        seen = seen.__cause__ or seen.__context__
    return None


def decode_revert(error: BaseException) -> ContractRevert | None:
    from eth_abi import decode

    data = revert_data(error)
    if data is None or data[:4] not in _error_table():
        return None
    from eth_utils import to_checksum_address

    name, types = _error_table()[data[:4]]
    values = [to_checksum_address(v) if t == "address" else v for t, v in zip(types, decode(types, data[4:]))]
    return ContractRevert(name, values)


def load_private_key(key_file: str | None, key_env: str = KEY_ENV) -> str:
    if key_file:
        try:
            key = Path(key_file).expanduser().read_text().strip()
        except OSError as e:
            raise CoordinatorError(f"cannot read the private key file {key_file}: {e}") from e
    elif os.environ.get(key_env):
        key = os.environ[key_env].strip()
    else:
        raise CoordinatorError(f"no private key: set coordinator.key_file=PATH or the {key_env} environment variable")
    if len(key.removeprefix("0x")) != 64:
        raise CoordinatorError(f"the private key{' in ' + key_file if key_file else ''} is not 32 hex bytes")
    return key


@dataclass
class ChainClient:
    """One account on one chain: reads and signed writes with retries."""

    w3: Any
    private_key: str
    retries: int = 5
    receipt_timeout: float = 60.0

    def __post_init__(self) -> None:
        from eth_account import Account

        self.account = Account.from_key(self.private_key)
        self.address: str = self.account.address
        self._nonce: int | None = None

    def _retrying(self, action: Callable[[], T], what: str) -> T:
        for attempt in range(self.retries):
            try:
                return action()
            except ContractRevert:
                raise
            except Exception as e:  # noqa: BLE001 - sorted below: reverts out, transient errors retried
                revert = decode_revert(e)
                if revert is not None:
                    raise revert from e
                if not _transient(e) or attempt == self.retries - 1:
                    raise CoordinatorError(f"{what} failed: {e}") from e
                log.warning("%s: transient RPC error (%s), retry %d/%d", what, e, attempt + 1, self.retries)
                self._nonce = None  # re-read: a lost transaction may or may not have landed
                time.sleep(min(0.5 * 2**attempt, 8))
        raise AssertionError("unreachable")

    def call(self, fn: Any) -> Any:
        return self._retrying(lambda: fn.call({"from": self.address}), f"call {fn.fn_name}")

    def transact(self, fn: Any) -> Any:
        def send() -> Any:
            if self._nonce is None:
                self._nonce = int(self.w3.eth.get_transaction_count(self.address, "pending"))
            tx = fn.build_transaction({"from": self.address, "nonce": self._nonce})
            signed = self.account.sign_transaction(tx)
            tx_hash = self.w3.eth.send_raw_transaction(signed.raw_transaction)
            self._nonce += 1
            receipt = self.w3.eth.wait_for_transaction_receipt(tx_hash, timeout=self.receipt_timeout)
            if receipt["status"] != 1:
                raise CoordinatorError(f"transaction {tx_hash.hex()} failed on chain")
            return receipt

        return self._retrying(send, f"transaction {getattr(fn, 'fn_name', 'deploy')}")

    def deploy(self, num_stages: int) -> str:
        factory = self.w3.eth.contract(abi=artifact()["abi"], bytecode=artifact()["bytecode"])
        return str(self.transact(factory.constructor(num_stages))["contractAddress"])


def _transient(error: BaseException) -> bool:
    text = f"{type(error).__name__} {error}".lower()
    return any(word in text for word in ("timeout", "timed out", "connection", "nonce too low", "temporarily", "429", "503", "502"))


def connect(rpc_url: str) -> Any:
    from web3 import HTTPProvider, Web3

    w3 = Web3(HTTPProvider(rpc_url, request_kwargs={"timeout": 30}))
    try:
        w3.eth.chain_id
    except Exception as e:  # noqa: BLE001 - any failure here means the node is not reachable
        raise CoordinatorError(f"no JSON-RPC node answers at {rpc_url}: {e}") from e
    return w3


class EvmCoordinator(Coordinator):
    """The referee on chain: registers the peer, follows the chain's round, submits rewards
    and winner votes, and advances the round when this account is the stage manager."""

    shared_per_process: ClassVar[bool] = False  # one account per peer

    def __init__(
        self,
        rpc_url: str | None = None,
        contract: str | None = None,
        key_file: str | None = None,
        key_env: str = KEY_ENV,
        round_wait: float = 120.0,
        retries: int = 5,
        w3: Any = None,
    ) -> None:
        rpc_url = rpc_url or os.environ.get(RPC_ENV, "http://127.0.0.1:8545")
        contract = contract or os.environ.get(CONTRACT_ENV)
        if not contract:
            raise CoordinatorError(f"no contract address: set coordinator.contract=0x... or {CONTRACT_ENV}")
        self.w3 = w3 if w3 is not None else connect(rpc_url)
        self.client = ChainClient(self.w3, load_private_key(key_file, key_env), retries)
        if not self.w3.eth.get_code(contract):
            raise CoordinatorError(f"no contract at {contract} on {rpc_url}: deploy one with `genrl-swarm chain deploy`")
        self.contract = self.w3.eth.contract(address=contract, abi=artifact()["abi"])
        self.round_wait = round_wait
        self.peer_id = ""
        self.known_peers: set[str] = set()

    def _fn(self, name: str, *args: Any) -> Any:
        return getattr(self.contract.functions, name)(*args)

    def register(self, peer_id: str) -> None:
        holder = self.client.call(self._fn("accountOf", peer_id))
        if holder == self.client.address:
            log.info("%s is already registered to %s", peer_id, holder)
        elif int(holder, 16) != 0:
            raise CoordinatorError(f"peer id {peer_id} belongs to {holder}, not to this key's {self.client.address}")
        else:
            self.client.transact(self._fn("registerPeer", peer_id))
        self.peer_id = peer_id
        self.known_peers.add(peer_id)

    def current_round(self) -> int:
        return int(self.client.call(self._fn("currentRound")))

    def report(self, result: RoundResult) -> None:
        self._wait_for_round(result.round)
        self.known_peers.update(result.rewards)
        reward = round(result.rewards.get(result.peer_id, 0.0) * REWARD_SCALE)
        self._idempotent(self._fn("submitReward", result.round, 0, result.peer_id, reward), "RewardAlreadySubmitted")
        if result.winners:
            self._idempotent(self._fn("submitWinners", result.round, result.peer_id, list(result.winners)), "AlreadyVoted")

    def _idempotent(self, fn: Any, done_error: str) -> None:
        """A resumed peer may repeat a round it already reported: that is not an error."""
        try:
            self.client.transact(fn)
        except ContractRevert as e:
            if e.name != done_error:
                raise
            log.info("%s: %s", self.peer_id, e)

    def _wait_for_round(self, r: int) -> None:
        deadline = time.monotonic() + self.round_wait
        while (chain := self.current_round()) < r:
            if time.monotonic() > deadline:
                raise CoordinatorError(
                    f"the chain is at round {chain}, this peer finished round {r}: no stage manager advanced it "
                    f"within {self.round_wait:.0f}s (is the stage manager's peer running?)"
                )
            time.sleep(0.5)

    def finish_round(self, round: int) -> None:
        manager = self.client.call(self._fn("stageManager"))
        if manager == self.client.address and self.current_round() == round:
            self.client.transact(self._fn("advanceRound"))

    def standings(self) -> dict[str, float]:
        peers = sorted(self.known_peers)
        totals = self.client.call(self._fn("totalRewards", peers)) if peers else []
        return {p: t / REWARD_SCALE for p, t in zip(peers, totals)}

    def bootnodes(self) -> list[str]:
        return list(self.client.call(self._fn("bootnodes")))
