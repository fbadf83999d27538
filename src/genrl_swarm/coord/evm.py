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
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from genrl_swarm.coord import keys
from genrl_swarm.coord.chain_rewards import next_page
from genrl_swarm.coord.errors import CoordinatorError
from genrl_swarm.coord.scores import REWARD_SCALE, check_reward
from genrl_swarm.core.interfaces import Coordinator
from genrl_swarm.core.types import RoundResult

log = logging.getLogger(__name__)
ARTIFACT = Path(__file__).with_name("SwarmCoordinator.json")
KEY_ENV, RPC_ENV, CONTRACT_ENV = keys.KEY_ENV, "GENRL_SWARM_RPC_URL", "GENRL_SWARM_CONTRACT"
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


def _hex_in(data: Any, depth: int = 0) -> bytes | None:
    """Revert bytes in a JSON-RPC error's ``data``: a hex string (geth, anvil, hardhat, ganache's
    eth_call), or an object holding one: ganache 7's eth_estimateGas gives ``{"result": "0x.."}``,
    ganache 6 ``{"0x<tx hash>": {"return": "0x.."}}``."""
    if isinstance(data, str) and data.startswith("0x") and len(data) >= 10:
        try:
            return bytes.fromhex(data[2:])
        except ValueError:
            return None
    if isinstance(data, dict) and depth < 2:
        for key in ("result", "return", "data", *data):
            found = _hex_in(data.get(key), depth + 1) if key not in ("hash", "stack") else None
            if found is not None:
                return found
    return None


def revert_data(error: BaseException) -> bytes | None:
    """The raw revert bytes of a failed call: ``data`` from a JSON-RPC node, or, from
    eth-tester, the bytes of the EVM's Revert somewhere in the exception's chain."""
    seen: BaseException | None = error
    while seen is not None:
        data = _hex_in(getattr(seen, "data", None))
        if data is not None:
            return data
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
    elif value := keys.lookup(key_env):
        key = value.strip()
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
                raise self._mined_revert(fn, receipt) or CoordinatorError(f"transaction {tx_hash.hex()} failed on chain")
            return receipt

        return self._retrying(send, f"transaction {getattr(fn, 'fn_name', 'deploy')}")

    def _mined_revert(self, fn: Any, receipt: Any) -> ContractRevert | None:
        """Why a transaction reverted once mined although its gas estimate passed: another
        transaction got in first (two peers settling the same round). A receipt carries no
        revert data, so the call is replayed on the state of its block to name the error."""
        if not hasattr(fn, "call"):
            return None
        try:
            fn.call({"from": self.address}, block_identifier=receipt["blockNumber"])
        except Exception as e:  # noqa: BLE001 - only its revert data matters here
            return decode_revert(e)
        return None

    def deploy(self, num_stages: int) -> str:
        factory = self.w3.eth.contract(abi=artifact()["abi"], bytecode=artifact()["bytecode"])
        return str(self.transact(factory.constructor(num_stages))["contractAddress"])


#: Errors worth retrying. HTTP codes only as whole numbers: an out-of-gas message quoting a storage
#: key that happens to contain "502" is not a gateway error (it was retried 5 times with back-off).
_TRANSIENT = re.compile(r"timeout|timed out|connection|nonce too low|temporarily|\b(?:429|502|503)\b")


def _transient(error: BaseException) -> bool:
    return _TRANSIENT.search(f"{type(error).__name__} {error}".lower()) is not None


def connect(rpc_url: str) -> Any:
    from web3 import HTTPProvider, Web3

    w3 = Web3(HTTPProvider(rpc_url, request_kwargs={"timeout": 30}))
    try:
        _ = w3.eth.chain_id  # the first call that reaches the node
    except Exception as e:  # noqa: BLE001 - any failure here means the node is not reachable
        raise CoordinatorError(f"no JSON-RPC node answers at {rpc_url}: {e}") from e
    return w3


class EvmCoordinator(Coordinator):
    """The referee on chain: registers this peer's account, follows the chain's round, submits
    this peer's scores of the peers it played with (itself included: one vote of many), settles
    past rounds page by page, and advances the round when this account is the stage manager.

    Scores are credited to accounts. A peer id's account is learned from the peer's signed
    commitments (``learn_accounts``) and used only once the account's on-chain label names that
    peer id too: both sides signed the binding, so nobody can divert another peer's credit or
    make a report revert by claiming someone else's account.
    """

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
        settle_page: int = 64,
        report_part: int = 256,
    ) -> None:
        if settle_page < 1 or report_part < 1:
            raise CoordinatorError(f"settle_page and report_part must be >= 1, got {settle_page} and {report_part}")
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
        self.settle_page = settle_page  # scored peers per finalizeRound page (halved when one fails)
        self.report_part = report_part  # peers per submitScoresPart transaction (a block holds ~1,000 scores)
        self.account = self.client.address
        self.peer_id = ""
        self.claimed: dict[str, str] = {}  # peer id -> account it signed, not yet confirmed on chain
        self.accounts: dict[str, str] = {}  # peer id -> account, confirmed by the account's label
        self._unsettled = 0  # lowest round not known to be finalized

    def _fn(self, name: str, *args: Any) -> Any:
        return getattr(self.contract.functions, name)(*args)

    def register(self, peer_id: str) -> None:
        if self.client.call(self._fn("isRegistered", self.account)):
            (label,) = self.client.call(self._fn("labels", [self.account]))
            if label != peer_id:
                log.warning("account %s is registered as %r on chain, not as %s: peers will not credit it "
                            "(use a fresh key for a new peer id)", self.account, label, peer_id)  # fmt: skip
            else:
                log.info("%s is already registered with %s", peer_id, self.account)
        else:
            self._idempotent(self._fn("registerPeer", peer_id), ("AlreadyRegistered",))
        self.peer_id = peer_id
        self.accounts[peer_id] = self.account
        self._unsettled = max(self._unsettled, self.current_round() - 2)

    def learn_accounts(self, accounts: Mapping[str, str]) -> None:
        from eth_utils import is_address, to_checksum_address

        for peer, account in accounts.items():
            if not is_address(account):
                log.debug("%s: %s signed %r, not an address: ignored", self.peer_id, peer, account)
            elif peer != self.peer_id and self.accounts.get(peer) != to_checksum_address(account):
                self.claimed[peer] = to_checksum_address(account)

    def _confirmed(self) -> dict[str, str]:
        """Bindings whose account's on-chain label is the peer id (labels never change, so a
        confirmed binding is kept; a claim is checked again until its account registers)."""
        pending = {p: a for p, a in self.claimed.items() if a != self.account}
        if pending:
            labels = self.client.call(self._fn("labels", list(pending.values())))
            for (peer, account), label in zip(pending.items(), labels):
                if label == peer:
                    self.accounts[peer] = account
                    del self.claimed[peer]
        return self.accounts

    def current_round(self) -> int:
        return int(self.client.call(self._fn("currentRound")))

    def report(self, result: RoundResult) -> None:
        """Submit this peer's scores of the peers whose account it knows, its own included (the
        chain takes a peer's reward from all the round's voters, so its own is one vote). A report
        with no score is not sent: the contract refuses it (an empty report is no vote)."""
        self._wait_for_round(result.round)
        accounts = self._confirmed()
        scores: dict[str, int] = {}
        skipped = []
        for peer, reward in result.rewards.items():
            account = self.account if peer == result.peer_id else accounts.get(peer)
            if account is None:
                skipped.append(peer)
                continue
            try:
                scores[account] = round(check_reward(peer, reward) * REWARD_SCALE)
            except ValueError as e:
                log.warning("%s: round %d: %s; not submitted", self.peer_id, result.round, e)
        if skipped:
            log.debug(
                "%s: round %d: no confirmed account for %s: their scores stay off chain", self.peer_id, result.round, ", ".join(sorted(skipped))
            )
        if not scores:
            log.info("%s: round %d: no score to submit (the chain takes no empty report)", self.peer_id, result.round)
            return
        ordered = sorted(scores, key=lambda a: int(a, 16))  # the contract takes peers strictly ascending
        parts = [ordered[i : i + self.report_part] for i in range(0, len(ordered), self.report_part)]
        for i, part in enumerate(parts):  # a part sent again (a resumed peer) is AlreadyScored: done
            values = [scores[a] for a in part]
            fn = self._fn("submitScores", result.round, part, values) if len(parts) == 1 else \
                self._fn("submitScoresPart", result.round, part, values, i == len(parts) - 1)  # fmt: skip
            self._idempotent(fn, ("AlreadyScored", "AlreadyFinalized", "RoundClosed", "RoundSettling"))

    def _idempotent(self, fn: Any, done_errors: tuple[str, ...]) -> None:
        """A resumed peer may repeat what it already did, a late one may find the round
        settled, two peers may settle the same round: none of that is an error."""
        try:
            self.client.transact(fn)
        except ContractRevert as e:
            if e.name not in done_errors:
                raise
            (log.warning if e.name in ("RoundClosed", "RoundSettling") else log.info)("%s: %s", self.peer_id, e)

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
        """Advance the round when this account is the stage manager, then settle every past
        round no score can change any more, so totals and wins move."""
        manager = self.client.call(self._fn("stageManager"))
        if manager == self.account and self.current_round() == round:
            self.client.transact(self._fn("advanceRound"))
        self.settle()

    def settle(self) -> None:
        """Finalize past rounds from the oldest this peer has not seen settled; stops at the
        first that is still open (someone has yet to report it within its grace round). A round
        that fails to settle is logged and tried again after the next round: settling is anyone's
        job, and never worth crashing a peer that is training."""
        chain = self.current_round()
        while self._unsettled < chain:
            try:
                if not self._settle_round(self._unsettled):
                    return
            except CoordinatorError as e:
                log.warning("%s: round %d not settled (%s); tried again after the next round", self.peer_id, self._unsettled, e)
                return
            self._unsettled += 1

    def _settle_round(self, r: int) -> bool:
        """Sends ``finalizeRound`` pages, each with its peers' medians (``next_page``: the
        contract verifies them), until round ``r`` is settled (True) or found still open (False).
        A page another peer settled first (``PageStart``) is read again; one that fails other than
        by a revert (out of gas, too big for a block) is retried at half the size, down to one
        peer; the smaller size is kept for later rounds."""
        page = self.settle_page
        while True:
            finalized, _, _ = self.client.call(self._fn("roundStatus", r))
            if finalized:
                return True
            if not self.client.call(self._fn("canFinalize", r)):
                return False
            start, medians = next_page(self.client, self.contract, r, page)
            try:
                self._idempotent(self._fn("finalizeRound", r, start, medians), ("AlreadyFinalized", "PageStart"))
            except ContractRevert:
                raise
            except CoordinatorError:
                if page == 1:
                    raise
                page = self.settle_page = page // 2  # kept: the next rounds start at a size that fits
                log.info("%s: round %d: a settle page failed, retrying with %d peers a page", self.peer_id, r, page)

    def standings(self) -> dict[str, float]:
        """Total reward per peer id whose account this peer knows (its own included)."""
        peers = sorted(self._confirmed())
        totals = self.client.call(self._fn("totalRewards", [self.accounts[p] for p in peers])) if peers else []
        return {p: t / REWARD_SCALE for p, t in zip(peers, totals)}

    def tally(self, peer_id: str) -> tuple[float, int]:
        account = self.account if peer_id == self.peer_id else self._confirmed().get(peer_id)
        if account is None:
            return 0.0, 0
        (total,) = self.client.call(self._fn("totalRewards", [account]))
        (wins,) = self.client.call(self._fn("winCounts", [account]))
        return total / REWARD_SCALE, int(wins)

    def bootnodes(self) -> list[str]:
        return list(self.client.call(self._fn("bootnodes")))
