"""Coordinator parts one at a time: the scoring rules, LocalCoordinator's round keeping, and the
EVM client's plumbing (revert decoding, keys, retries, account bindings) on an in-process EVM."""

from __future__ import annotations

import http.server
import json
import logging
import os
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.coord.errors import CoordinatorError
from genrl_swarm.coord.scores import MAX_REWARD, REWARD_SCALE, check_reward, round_reward, round_winner
from genrl_swarm.core.types import RoundResult, tie_break

warnings.filterwarnings("ignore", category=DeprecationWarning)


# ------------------------------------------------------------------------------ scores
@pytest.mark.parametrize("value", [MAX_REWARD, -MAX_REWARD, 0, 3, -0.5])
def test_check_reward_takes_numbers_within_the_bound(value: float) -> None:
    got = check_reward("p", value)
    assert got == value and type(got) is float


@pytest.mark.parametrize(
    "value, message",
    [
        (True, "reward for p is not a number: True"),
        (None, "reward for p is not a number: None"),
        (MAX_REWARD + 0.5, "reward for p must be finite with |reward| <= 1e+06, got 1000000.5"),
        (float("nan"), "reward for p must be finite with |reward| <= 1e+06, got nan"),
    ],
)
def test_check_reward_refuses_with_a_one_line_message(value: object, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_reward("p", value)
    assert str(caught.value) == message


def test_the_bounds_match_the_contracts() -> None:
    assert (MAX_REWARD, REWARD_SCALE) == (1e6, 1_000_000)


@pytest.mark.parametrize(
    "scores, voters, reward",
    [([5.0], 1, 5.0), ([3.0, 1.0, 2.0], 3, 2.0), ([4.0, 1.0, 3.0, 2.0], 4, 2.0), ([9.0, 1.0], 2, 1.0), ([-9.0, 1.0], 2, 0.0),
     ([1e6], 5, 0.0), ([1e6, 1e6, 1e6], 5, 1e6), ([], 3, 0.0), ([-1.0, -2.0], 3, -1.0)],
)  # fmt: skip
def test_round_reward_is_the_median_of_the_votes_missing_ones_and_ties_neutral(scores: list[float], voters: int, reward: float) -> None:
    assert round_reward(scores, voters) == reward


def test_round_reward_takes_no_more_scores_than_voters() -> None:
    with pytest.raises(ValueError, match="3 scores from 2 voters"):
        round_reward([1.0, 2.0, 3.0], 2)


def test_round_winner_is_the_highest_median_and_ties_go_by_the_round_hash() -> None:
    assert round_winner(0, {}) is None
    assert round_winner(3, {"a": 0.5, "b": 0.75, "c": -1.0}) == "b"
    tied = dict.fromkeys(("a", "b", "c", "d"), 1.0)
    for r in range(4):
        assert round_winner(r, {**tied, "e": 0.5}) == min(tied, key=lambda p: tie_break(r, p))


# ------------------------------------------------------------------------------ LocalCoordinator
def local(*peers: str, settle_wait: float = 0.0) -> LocalCoordinator:
    c = LocalCoordinator(settle_wait=settle_wait)
    for peer in peers:
        c.register(peer)
    return c


def say(c: LocalCoordinator, round: int, peer: str, rewards: dict[str, float]) -> None:
    c.report(RoundResult(round, peer, rewards, ()))


def test_local_defaults() -> None:
    c = LocalCoordinator()
    assert c.settle_wait == 30.0 and c.current_round() == 0 and c.standings() == {}


@pytest.mark.parametrize("wait", [0.0, 9_999_999.0])
def test_settle_wait_bounds_accepted(wait: float) -> None:
    assert LocalCoordinator(settle_wait=wait).settle_wait == wait


@pytest.mark.parametrize("wait", [-0.5, 1e7, float("nan"), float("inf")])
def test_settle_wait_bounds_refused(wait: float) -> None:
    with pytest.raises(ValueError, match=rf"settle_wait must be >= 0 and finite, got {wait!r}"):
        LocalCoordinator(settle_wait=wait)


def test_finish_round_advances_the_round_and_never_moves_it_back() -> None:
    c = local("a")
    c.finish_round(4)
    c.finish_round(2)
    assert c.current_round() == 5


def test_finish_round_waits_only_for_the_previous_rounds_reporters() -> None:
    c = local("a", "b", "silent")
    for r in (0, 1):
        say(c, r, "a", {"b": 0.5})
        say(c, r, "b", {"a": 0.5})
    c.finish_round(0)  # round -1 had no reporters: every peer is waited for, zero seconds
    c.settle_wait = 5.0
    start = time.monotonic()
    c.finish_round(1)  # a and b reported round 0 and round 1: nothing to wait for
    assert time.monotonic() - start < 2


def test_a_peer_that_leaves_is_not_waited_for() -> None:
    """Ctrl-C stops each in-process peer after its round step, so one can stop a round before
    another, which then waited ``settle_wait`` (30 s) in finish_round for a report that never
    comes: leaving ends that wait at once, and a peer that registers again is waited for again."""
    c = local("a", "b", settle_wait=30.0)
    say(c, 0, "a", {"b": 0.5})
    say(c, 0, "b", {"a": 0.5})
    say(c, 1, "a", {"b": 0.5})  # b stops before round 1
    waiting = threading.Thread(target=c.finish_round, args=(1,))
    start = time.monotonic()
    waiting.start()
    time.sleep(0.2)
    assert waiting.is_alive()  # b reported round 0: a waits for it
    c.leave("b")
    waiting.join(5)
    assert not waiting.is_alive() and time.monotonic() - start < 5
    c.register("b")  # resumed: waited for again
    for peer in ("a", "b"):
        say(c, 2, peer, {})
    say(c, 3, "a", {})
    c.settle_wait = 0.3
    start = time.monotonic()
    c.finish_round(3)
    assert time.monotonic() - start >= 0.3


def test_finish_round_logs_who_it_did_not_wait_for(caplog: pytest.LogCaptureFixture) -> None:
    c = local("a", "b", "c")
    say(c, 0, "a", {})
    say(c, 0, "b", {})
    say(c, 0, "c", {})
    say(c, 1, "a", {})
    with caplog.at_level(logging.INFO, logger="genrl_swarm.coord.local"):
        c.finish_round(1)
    assert [r.getMessage() for r in caplog.records] == ["round 1 settles without a report from b, c (waited 0s)"]


def test_a_late_peer_finishing_an_old_round_is_told_it_was_settled(caplog: pytest.LogCaptureFixture) -> None:
    """Settled rounds are closed: a late peer finishing one waits for nobody and reopens nothing."""
    c = local("a", "b", "c")
    for r in range(4):
        say(c, r, "a", {"b": 0.5})
        say(c, r, "b", {"a": 0.5})
        c.finish_round(r)
    with caplog.at_level(logging.INFO, logger="genrl_swarm.coord.local"):
        c.finish_round(1)
    assert "round 1 was settled already (the swarm is at round 4): nothing to wait for" in caplog.text and c.settled(1)


def test_empty_reports_settle_without_scores() -> None:
    c = local("a", "b")
    say(c, 0, "a", {})
    say(c, 0, "b", {})
    assert c.standings() == {"a": 0.0, "b": 0.0}
    c.finish_round(0)
    c.finish_round(1)
    assert c.tally("a") == (0.0, 0) and c.tally("nobody") == (0.0, 0)


def test_a_report_for_a_settled_round_is_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    c = local("a", "b")
    c.finish_round(0)
    c.finish_round(1)
    with caplog.at_level(logging.WARNING, logger="genrl_swarm.coord.local"):
        say(c, 0, "b", {"a": 1.0})
    assert [r.getMessage() for r in caplog.records] == ["b reported round 0, settled already (the swarm is at 2): ignored"]
    assert c.standings() == {"a": 0.0, "b": 0.0}


def test_settled_wins_and_rewards_accumulate_over_rounds() -> None:
    c = local("a", "b", "c")
    for r in range(3):
        say(c, r, "a", {"b": 0.25, "c": 0.5})
        say(c, r, "b", {"a": 0.0, "c": 0.5})
        say(c, r, "c", {"a": 0.0, "b": 0.25})
        c.finish_round(r)
    c.finish_round(3)  # rounds 0..2 frozen
    assert c.tally("c") == (1.5, 3) and c.tally("b") == (0.75, 0)


def test_restore_replaces_the_settled_books_and_keeps_the_open_rounds() -> None:
    c = local("a", "b")
    for r in range(3):
        say(c, r, "a", {"a": 0.25, "b": 0.5})
        say(c, r, "b", {"a": 0.25, "b": 0.5})
        c.finish_round(r)  # at round 3: rounds 0 and 1 settled, round 2 still open
    c.restore("a", 10.0, 7)
    assert c.tally("a") == (10.25, 7) and c.tally("b") == (1.5, 3)


# ------------------------------------------------------------------------------ EVM helpers
web3 = pytest.importorskip("web3")
from genrl_swarm.coord import evm  # noqa: E402
from genrl_swarm.coord.chain_rewards import chain_median  # noqa: E402
from genrl_swarm.coord.evm import (  # noqa: E402
    ChainClient,
    ContractRevert,
    EvmCoordinator,
    _hex_in,
    _transient,
    connect,
    decode_revert,
    load_private_key,
    revert_data,
)

KEY = "0x" + "11" * 32
ALREADY = web3.Web3.keccak(text="AlreadyFinalized(uint256)")[:4] + (7).to_bytes(32, "big")
NOT_OWNER = web3.Web3.keccak(text="NotOwner(address)")[:4] + bytes(12) + bytes.fromhex("ab" * 20)


@pytest.mark.parametrize(
    "data, found",
    [
        ("0x" + "ab" * 4, b"\xab" * 4),  # 10 characters: the shortest revert (a bare selector)
        ("0x" + "ab" * 3 + "a", None),
        ("0X" + "ab" * 4, None),
        ("0x" + "zz" * 4, None),
        ("ab" * 5, None),
        (b"0xabababab", None),
        ({"result": "0xabababab", "data": "0xcdcdcdcd"}, b"\xab" * 4),
        ({"return": "0xabababab", "data": "0xcdcdcdcd"}, b"\xab" * 4),
        ({"data": "0xcdcdcdcd", "x": "0xabababab"}, b"\xcd" * 4),
        ({"0xhash": {"return": "0xabababab"}}, b"\xab" * 4),  # two levels deep: found
        ({"a": {"b": {"c": "0xabababab"}}}, None),  # three: not looked at
        ({"hash": "0x" + "ab" * 32, "stack": "0xabababab"}, None),
        ({"message": "revert"}, None),
    ],
)
def test_hex_in_finds_revert_bytes_in_every_node_shape(data: Any, found: bytes | None) -> None:
    assert _hex_in(data) == found


class Wrapped(Exception):
    pass


def chained(inner: BaseException, how: str) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as e:
            if how == "cause":
                raise Wrapped("outer") from e
            raise Wrapped("outer")  # noqa: B904 - implicit context on purpose
    except Wrapped as outer:
        return outer


@pytest.mark.parametrize(
    "error, found",
    [
        (Exception(b"\x01\x02\x03\x04"), b"\x01\x02\x03\x04"),
        (Exception(b"\x01\x02\x03"), None),
        (Exception(Exception(b"\x01\x02\x03\x04")), b"\x01\x02\x03\x04"),
        (Exception("x", b"\x01\x02\x03\x04"), None),
        (Exception("execution reverted: b'\\x01\\x02\\x03\\x04'"), b"\x01\x02\x03\x04"),
        (Exception("execution reverted: 'text'"), None),
        (Exception(), None),
        (chained(Exception(b"\x05\x06\x07\x08"), "cause"), b"\x05\x06\x07\x08"),
        (chained(Exception(b"\x05\x06\x07\x08"), "context"), b"\x05\x06\x07\x08"),
    ],
)
def test_revert_data_walks_the_exception_chain(error: BaseException, found: bytes | None) -> None:
    assert revert_data(error) == found


def test_decode_revert_names_the_error_and_checksums_addresses() -> None:
    decoded = decode_revert(Exception(NOT_OWNER))
    assert decoded is not None and decoded.name == "NotOwner"
    assert decoded.args_ == (web3.Web3.to_checksum_address("0x" + "ab" * 20),)
    assert str(decode_revert(Exception(ALREADY))) == "SwarmCoordinator reverted: AlreadyFinalized(7,)"
    assert decode_revert(Exception(b"\x00\x00\x00\x00" + bytes(32))) is None
    assert decode_revert(Exception("nothing")) is None


def test_load_private_key_from_a_file_or_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "k").write_text(f"  {KEY}\n")
    assert load_private_key(str(tmp_path / "k")) == KEY
    monkeypatch.setenv("MY_KEY", " " + KEY.removeprefix("0x") + " ")
    assert load_private_key(None, "MY_KEY") == KEY.removeprefix("0x")
    assert "MY_KEY" not in os.environ  # taken out of the environment: no child inherits it
    assert load_private_key(None, "MY_KEY") == KEY.removeprefix("0x")  # and still this process's
    with pytest.raises(CoordinatorError) as none:
        load_private_key(None, "NEVER_SET_KEY")
    assert str(none.value) == "no private key: set coordinator.key_file=PATH or the NEVER_SET_KEY environment variable"


def test_load_private_key_errors_name_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "short").write_text(KEY + "00")
    with pytest.raises(CoordinatorError) as short:
        load_private_key(str(tmp_path / "short"))
    assert str(short.value) == f"the private key in {tmp_path / 'short'} is not 32 hex bytes"
    monkeypatch.setenv("MY_KEY", "0x1234")
    with pytest.raises(CoordinatorError) as env:
        load_private_key(None, "MY_KEY")
    assert str(env.value) == "the private key is not 32 hex bytes"
    with pytest.raises(CoordinatorError) as missing:
        load_private_key(str(tmp_path / "nope"))
    assert str(missing.value).startswith(f"cannot read the private key file {tmp_path / 'nope'}: [Errno 2]")


@pytest.mark.parametrize(
    "error, transient",
    [
        (TimeoutError("x"), True),
        (Exception("Read Timed Out"), True),
        (ConnectionError("reset"), True),
        (Exception("Connection refused"), True),
        (Exception("nonce too low"), True),
        (Exception("Service temporarily unavailable"), True),
        (Exception("429 Too Many Requests"), True),
        (Exception("503"), True),
        (Exception("502 Bad Gateway"), True),
        (Exception("execution reverted"), False),
        (ValueError("invalid nonce"), False),
    ],
)
def test_transient_errors_are_told_apart(error: BaseException, transient: bool) -> None:
    assert _transient(error) is transient


class JsonRpc(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": "0x539"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def rpc_url() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), JsonRpc)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_connect_talks_to_the_node_with_a_deadline(rpc_url: str) -> None:
    w3 = connect(rpc_url)
    assert w3.eth.chain_id == 1337 and w3.provider.endpoint_uri == rpc_url
    assert w3.provider.get_request_kwargs()["timeout"] == 30


def test_connect_names_an_unreachable_node() -> None:
    with pytest.raises(CoordinatorError, match=r"^no JSON-RPC node answers at http://127.0.0.1:9/: "):
        connect("http://127.0.0.1:9/")


# ------------------------------------------------------------------------------ ChainClient
@pytest.fixture(scope="module")
def tester() -> Any:
    from eth.estimators.gas import binary_gas_search

    from test_contract import Chain

    chain = Chain(accounts=4)
    chain.w3.provider.ethereum_tester.backend.chain.gas_estimator = binary_gas_search(tolerance=10**12)  # one run per estimate
    return chain


@pytest.fixture
def contract(tester: Any) -> Any:
    address = ChainClient(tester.w3, tester.keys[0]).deploy(num_stages=1)
    return tester.w3.eth.contract(address=address, abi=evm.artifact()["abi"])


class Flaky:
    """An RPC action failing ``times`` times with ``error`` before it answers."""

    def __init__(self, times: int, error: BaseException) -> None:
        self.left, self.error, self.calls = times, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.left > 0:
            self.left -= 1
            raise self.error
        return "answer"


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The back-off sleeps, recorded instead of slept (the schedule is what is checked)."""
    slept: list[float] = []
    monkeypatch.setattr(evm.time, "sleep", slept.append)
    return slept


def test_retrying_backs_off_on_transient_errors_then_answers(tester: Any, waits: list[float], caplog: pytest.LogCaptureFixture) -> None:
    client = ChainClient(tester.w3, tester.keys[1], retries=7)
    client._nonce = 5
    flaky = Flaky(6, ConnectionError("reset by peer"))
    with caplog.at_level(logging.WARNING, logger="genrl_swarm.coord.evm"):
        assert client._retrying(flaky, "call x") == "answer"
    assert flaky.calls == 7 and waits == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert "call x: transient RPC error (reset by peer), retry 1/7" in caplog.text
    assert "call x: transient RPC error (reset by peer), retry 6/7" in caplog.text
    assert client._nonce is None  # a lost transaction may have landed: the nonce is read again


def test_retrying_gives_up_after_its_retries(tester: Any, waits: list[float]) -> None:
    client = ChainClient(tester.w3, tester.keys[1], retries=3)
    flaky = Flaky(10, TimeoutError("timed out"))
    with pytest.raises(CoordinatorError, match=r"^call x failed: timed out$"):
        client._retrying(flaky, "call x")
    assert flaky.calls == 3 and waits == [0.5, 1.0]


def test_retrying_raises_other_errors_and_reverts_at_once(tester: Any, waits: list[float]) -> None:
    client = ChainClient(tester.w3, tester.keys[1])
    with pytest.raises(CoordinatorError, match=r"^call x failed: bad argument$"):
        client._retrying(Flaky(1, ValueError("bad argument")), "call x")
    with pytest.raises(ContractRevert) as caught:
        client._retrying(Flaky(1, Exception(ALREADY)), "call x")
    assert (caught.value.name, caught.value.args_) == ("AlreadyFinalized", (7,))
    flaky = Flaky(1, ContractRevert("RoundOpen", (1, 1)))
    with pytest.raises(ContractRevert):
        client._retrying(flaky, "call x")
    assert flaky.calls == 1 and waits == []


def test_a_stale_nonce_is_read_again_after_a_transient_error(tester: Any, contract: Any, waits: list[float]) -> None:
    client = ChainClient(tester.w3, tester.keys[2])
    client._nonce = 10**6  # what a lost transaction leaves behind
    fn = contract.functions.registerPeer("x")

    class DropsOnce:
        fn_name, dropped = "registerPeer", False

        def build_transaction(self, tx: dict[str, Any]) -> Any:
            if not self.dropped:
                self.dropped = True
                raise ConnectionError("connection dropped")
            return fn.build_transaction(tx)

    assert client.transact(DropsOnce())["status"] == 1
    assert contract.functions.isRegistered(client.address).call()


def test_call_reads_as_this_account(tester: Any, contract: Any) -> None:
    client = ChainClient(tester.w3, tester.keys[3])
    assert client.call(contract.functions.owner()) == tester.acct(0)
    assert client.call(contract.functions.progress()) == [0, 0, 1]


def test_deploy_sets_the_stage_count(tester: Any) -> None:
    client = ChainClient(tester.w3, tester.keys[1])
    address = client.deploy(num_stages=3)
    assert tester.w3.eth.contract(address=address, abi=evm.artifact()["abi"]).functions.numStages().call() == 3


# ------------------------------------------------------------------------------ EvmCoordinator
def coordinator(tester: Any, contract: Any, tmp_path: Path, who: int, **kwargs: Any) -> EvmCoordinator:
    (tmp_path / f"k{who}").write_text(tester.keys[who])
    return EvmCoordinator(contract=contract.address, key_file=str(tmp_path / f"k{who}"), w3=tester.w3, **kwargs)


def test_evm_coordinator_needs_a_contract_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GENRL_SWARM_CONTRACT", raising=False)
    with pytest.raises(CoordinatorError) as caught:
        EvmCoordinator(w3=object(), key_file="unused")
    assert str(caught.value) == "no contract address: set coordinator.contract=0x... or GENRL_SWARM_CONTRACT"


def test_evm_coordinator_needs_code_at_the_address(tester: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "k").write_text(tester.keys[1])
    empty = tester.acct(3)
    monkeypatch.setenv("GENRL_SWARM_CONTRACT", empty)
    monkeypatch.delenv("GENRL_SWARM_RPC_URL", raising=False)
    with pytest.raises(CoordinatorError) as caught:
        EvmCoordinator(key_file=str(tmp_path / "k"), w3=tester.w3)
    assert str(caught.value) == f"no contract at {empty} on http://127.0.0.1:8545: deploy one with `genrl-swarm chain deploy`"
    monkeypatch.setenv("GENRL_SWARM_RPC_URL", "http://node:1")
    with pytest.raises(CoordinatorError, match=f"no contract at {empty} on http://node:1: "):
        EvmCoordinator(key_file=str(tmp_path / "k"), w3=tester.w3)


def test_evm_coordinator_takes_the_contract_and_key_from_the_environment(tester: Any, contract: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GENRL_SWARM_CONTRACT", contract.address)
    monkeypatch.setenv("PEER_KEY", tester.keys[2])
    c = EvmCoordinator(key_env="PEER_KEY", w3=tester.w3, round_wait=7.0, retries=2)
    assert (c.account, c.client.retries, c.round_wait, c.peer_id) == (tester.acct(2), 2, 7.0, "")
    assert c.contract.address == contract.address and c.claimed == {} and c.accounts == {}


def test_register_binds_the_peer_and_warns_on_another_label(tester: Any, contract: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    c = coordinator(tester, contract, tmp_path, 1)
    c.register("p1")
    assert contract.functions.labels([c.account]).call() == ["p1"] and c.accounts == {"p1": c.account} and c.peer_id == "p1"
    again = coordinator(tester, contract, tmp_path, 1)
    with caplog.at_level(logging.INFO, logger="genrl_swarm.coord.evm"):
        again.register("p1")
        again.register("other")
    assert f"p1 is already registered with {c.account}" in caplog.text
    assert f"account {c.account} is registered as 'p1' on chain, not as other: peers will not credit it" in caplog.text


def test_register_starts_settling_two_rounds_back(tester: Any, contract: Any, tmp_path: Path) -> None:
    for _ in range(5):
        ChainClient(tester.w3, tester.keys[0]).transact(contract.functions.advanceRound())
    c = coordinator(tester, contract, tmp_path, 1)
    c.register("p1")
    assert c._unsettled == 3


def test_learn_accounts_keeps_only_new_well_formed_claims_of_others(
    tester: Any, contract: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    c = coordinator(tester, contract, tmp_path, 1)
    c.register("p1")
    other = tester.acct(2)
    with caplog.at_level(logging.DEBUG, logger="genrl_swarm.coord.evm"):
        c.learn_accounts({"p1": tester.acct(3), "p2": other.lower(), "bad": "0x1234"})
    assert c.claimed == {"p2": other}
    assert [r.getMessage() for r in caplog.records if "signed" in r.getMessage()] == ["p1: bad signed '0x1234', not an address: ignored"]
    c.accounts["p2"] = other
    c.claimed.clear()
    c.learn_accounts({"p2": other})  # already confirmed: nothing to check again
    assert c.claimed == {}


def test_a_claim_is_confirmed_only_by_the_accounts_own_label(tester: Any, contract: Any, tmp_path: Path) -> None:
    me, honest, liar = (coordinator(tester, contract, tmp_path, i) for i in (1, 2, 3))
    me.register("p1")
    honest.register("p2")
    liar.register("p3")
    me.learn_accounts({"p2": honest.account, "p9": liar.account, "p4": tester.acct(0), "mine": me.account})
    assert me.standings() == {"p1": 0.0, "p2": 0.0}
    assert me.claimed == {"p9": liar.account, "p4": tester.acct(0), "mine": me.account}  # still pending
    assert me.tally("p9") == (0.0, 0) and me.tally("p1") == (0.0, 0)


def test_report_submits_bounded_scores_of_confirmed_others(tester: Any, contract: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    me, b, c = (coordinator(tester, contract, tmp_path, i) for i in (1, 2, 3))
    for peer, co in (("p1", me), ("p2", b), ("p3", c)):
        co.register(peer)
    me.learn_accounts({"p2": b.account, "p3": c.account, "thief": me.account})
    me.accounts["thief"] = me.account  # a binding to this peer's own account is never scored
    with caplog.at_level(logging.WARNING, logger="genrl_swarm.coord.evm"):
        me.report(RoundResult(0, "p1", {"p1": 1.0, "p2": 0.5, "p3": float("nan"), "thief": 1.0, "ghost": 1.0}, ()))
    assert "p1: round 0: reward for p3 must be finite" in caplog.text and "; not submitted" in caplog.text
    assert chain_median(me.client, contract, 0, b.account) == 500_000 and len(contract.functions.votes(0, b.account).call()[0]) == 1
    assert chain_median(me.client, contract, 0, c.account) == 0 and contract.functions.votes(0, c.account).call()[0] == []


def test_report_sorts_accounts_as_the_contract_wants(tester: Any, contract: Any, tmp_path: Path) -> None:
    peers = [coordinator(tester, contract, tmp_path, i) for i in (0, 1, 2, 3)]
    for i, co in enumerate(peers):
        co.register(f"p{i}")
    me = peers[0]
    me.learn_accounts({f"p{i}": co.account for i, co in enumerate(peers)})
    me.report(RoundResult(0, "p0", {"p3": 0.25, "p1": 0.5, "p2": 0.75}, ()))
    got = [chain_median(me.client, contract, 0, co.account) for co in peers[1:]]
    assert got == [500_000, 750_000, 250_000]


def test_an_unexpected_revert_is_raised(tester: Any, contract: Any, tmp_path: Path) -> None:
    stranger = coordinator(tester, contract, tmp_path, 2)  # never registered
    with pytest.raises(ContractRevert) as caught:
        stranger.report(RoundResult(0, "p2", {"p2": 0.5}, ()))
    assert caught.value.name == "NotRegistered"


def test_settle_stops_at_the_first_open_round_and_resumes(tester: Any, contract: Any, tmp_path: Path) -> None:
    manager, b = coordinator(tester, contract, tmp_path, 0), coordinator(tester, contract, tmp_path, 1)
    manager.register("p0")
    b.register("p1")
    manager.report(RoundResult(0, "p0", {"p0": 0.5}, ()))
    manager.finish_round(0)  # round 0 open: p1 has not reported, its grace round runs
    assert manager.current_round() == 1 and manager._unsettled == 0
    b.finish_round(0)  # not the stage manager: the round stays
    assert b.current_round() == 1
    b.report(RoundResult(0, "p1", {"p1": 0.5}, ()))
    b.settle()  # everyone reported round 0: it settles
    assert contract.functions.roundStatus(0).call()[0] and b._unsettled == 1
    manager.finish_round(0)  # an old round: no advance; round 0 is found settled already
    assert manager.current_round() == 1 and manager._unsettled == 1
    manager.finish_round(1)
    manager.finish_round(2)
    assert manager.current_round() == 3 and manager._unsettled == 2  # round 1 settled after its grace round


def test_bootnodes_are_read_from_the_contract(tester: Any, contract: Any, tmp_path: Path) -> None:
    ChainClient(tester.w3, tester.keys[0]).transact(contract.functions.addBootnodes(["/ip4/1.2.3.4/tcp/1"]))
    assert coordinator(tester, contract, tmp_path, 1).bootnodes() == ["/ip4/1.2.3.4/tcp/1"]
