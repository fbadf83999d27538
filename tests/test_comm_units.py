"""Comm parts one at a time: the codec's limits and messages, signed commitments, the checks of
ByteBackend, the in-memory board, the null backend, and HiveMind membership bookkeeping (against an
in-process stand-in for the DHT: the real one needs p2pd daemons, seconds per test)."""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest

import genrl_swarm.protocol.exchange as exchange_rules
from genrl_swarm.comm import InMemoryBackend, InMemorySwarm, NullBackend
from genrl_swarm.comm.codec import (
    DOMAIN,
    MAX_RECORD_BYTES,
    Codec,
    Commitment,
    PayloadError,
    encode_signed,
    open_commitment,
    signed_message,
)
from genrl_swarm.core import FORMAT_VERSION, Task
from genrl_swarm.core.decoders import envelope_decoder
from genrl_swarm.core.identity import Identity

from helpers import Echo, Stranger, echo

INPUT = Task.create("q").input(0)


def body(text: str = "x") -> Echo:
    return echo(INPUT, text)


# ------------------------------------------------------------------------------ codec
def test_codec_needs_a_positive_limit() -> None:
    assert Codec(1).max_bytes == 1
    with pytest.raises(ValueError, match="^max_bytes must be positive$"):
        Codec(0)


def test_a_payload_exactly_at_the_limit_passes_both_ways() -> None:
    size = len(Codec().encode("p", 0, 0, [body()]))
    exact = Codec(size)
    assert exact.decode(exact.encode("p", 0, 0, [body()]), Echo).bodies == (body(),)
    with pytest.raises(PayloadError) as over:
        Codec(size - 1).encode("p", 2, 1, [body()])
    assert str(over.value) == (
        f"payload of p r2/s1 is {size} bytes, over the limit of {size - 1} (raise communication.max_bytes or share fewer rollouts)"
    )
    with pytest.raises(PayloadError) as decoded:
        Codec(size - 1).decode(Codec().encode("p", 0, 0, [body()]), Echo)
    assert str(decoded.value) == f"payload of {size} bytes is over the limit of {size - 1}"


def test_decode_takes_any_bytes_like_and_names_other_types() -> None:
    data = Codec().encode("p", 1, 0, [body()])
    for view in (bytearray(data), memoryview(data)):
        assert Codec().decode(view, Echo).sender == "p"
    with pytest.raises(PayloadError, match="^payload is list, not bytes$"):
        Codec().decode([1], Echo)  # type: ignore[arg-type]


def test_an_unencodable_body_is_a_payload_error() -> None:
    class Odd(Echo, frozen=True, tag="odd"):
        extra: object = None

    with pytest.raises(PayloadError, match=r"^cannot encode bodies of p r3/s1: "):
        Codec().encode("p", 3, 1, [Odd(INPUT.task_id, INPUT.digest, ("a",), extra=object())])


def test_decode_errors_are_cut_to_300_characters() -> None:
    envelope = {"version": FORMAT_VERSION, "sender": "a", "round": 0, "stage": 0, "bodies": [{"type": "x" * 1000}]}
    with pytest.raises(PayloadError) as caught:
        Codec().decode(msgspec.msgpack.encode(envelope), Echo)
    assert str(caught.value).startswith("bad payload: ") and len(str(caught.value)) == len("bad payload: ") + 300


def test_a_wrong_format_version_names_both() -> None:
    envelope = {"version": FORMAT_VERSION + 1, "sender": "a", "round": 0, "stage": 0, "bodies": []}
    with pytest.raises(PayloadError, match=rf"^format version {FORMAT_VERSION + 1}, this peer speaks {FORMAT_VERSION}$"):
        Codec().decode(msgspec.msgpack.encode(envelope), Echo)


def test_decoders_are_kept_per_body_type() -> None:
    """One per body type in the process, shared by every codec (core.decoders, issue 43)."""
    data = Codec().encode("p", 0, 0, [body()])
    Codec().decode(data, Echo)
    first = envelope_decoder(Echo)
    assert Codec().decode(data, Echo).bodies == (body(),) and envelope_decoder(Echo) is first


# ------------------------------------------------------------------------------ commitments
ME = Identity.generate()


def commitment(**fields: Any) -> Commitment:
    base = {"swarm": "s", "epoch": bytes(16), "round": 1, "stage": 0, "sender": ME.peer_id, "digest": bytes(32), "size": 5}
    return Commitment(**{**base, **fields})


def verifier(identity: Identity = ME) -> Any:
    from genrl_swarm.core.identity import verify

    return lambda message, signature: verify(identity.peer_id, message, signature)


def test_a_signed_message_is_domain_kind_and_record() -> None:
    assert signed_message("commit", b"rec") == DOMAIN + b"commit/rec" == b"genrl-swarm/v2/commit/rec"


def test_a_commitment_opens_under_its_signers_key_only() -> None:
    record = commitment(account="0xabc")
    blob = encode_signed("commit", record, ME.sign)
    seen: list[tuple[bytes, bytes]] = []

    def recording(message: bytes, signature: bytes) -> bool:
        seen.append((message, signature))
        return bool(verifier()(message, signature))

    assert open_commitment(blob, recording) == record
    assert seen[0][0] == signed_message("commit", msgspec.msgpack.encode(record)) and len(seen[0][1]) == 64
    with pytest.raises(PayloadError, match="^commitment signature does not verify under the sender's id$"):
        open_commitment(blob, verifier(Identity.generate()))


@pytest.mark.parametrize("data", ["text", bytearray(b"x"), b"\x00" * (MAX_RECORD_BYTES + 257)])
def test_not_a_signed_commitment(data: Any) -> None:
    with pytest.raises(PayloadError, match=r"^not a signed commitment \(wrong type or too large\)$"):
        open_commitment(data, verifier())


def test_a_record_at_the_size_limit_is_parsed_not_refused_unread() -> None:
    with pytest.raises(PayloadError, match="^bad signed record: "):
        open_commitment(b"\xc1" * (MAX_RECORD_BYTES + 256), verifier())


def test_bad_records_are_named_and_cut_to_200_characters() -> None:
    signed = {"kind": "commit", "record": b"r", "signature": b"s" * 64, "x" * 500: 1}
    with pytest.raises(PayloadError) as outer:
        open_commitment(msgspec.msgpack.encode(signed), verifier())
    assert str(outer.value).startswith("bad signed record: ") and len(str(outer.value)) == len("bad signed record: ") + 200
    record = msgspec.msgpack.encode({**msgspec.structs.asdict(commitment()), "y" * 500: 1})
    blob = msgspec.msgpack.encode({"kind": "commit", "record": record, "signature": ME.sign(signed_message("commit", record))})
    with pytest.raises(PayloadError) as inner:
        open_commitment(blob, verifier())
    assert str(inner.value).startswith("bad commitment: ") and len(str(inner.value)) == len("bad commitment: ") + 200


# ------------------------------------------------------------------------------ ByteBackend
def board(*names: str) -> tuple[InMemorySwarm, list[InMemoryBackend]]:
    swarm = InMemorySwarm()
    return swarm, [InMemoryBackend(swarm, n) for n in names]


def test_a_commitment_for_another_place_is_dropped_with_where_it_was_for() -> None:
    swarm, (me,) = board("me")
    liar = Stranger(swarm)
    record = Commitment("genrl-swarm", swarm.epoch.value, 0, 0, liar.peer_id, hashlib.sha256(b"payload").digest(), 7)
    swarm.post(1, 0, "commit", liar.peer_id, encode_signed("commit", record, liar.identity.sign))  # round 0's, posted for 1
    result = me.exchange(1, 0, [], timeout=0.3, body_type=Echo)
    assert result.dropped[liar.peer_id] == (f"commitment is for ('genrl-swarm', 0, 0, '{liar.peer_id}'), not ('genrl-swarm', 1, 0, '{liar.peer_id}')")


def test_a_commitment_over_the_size_limit_is_dropped_unread() -> None:
    swarm = InMemorySwarm()
    me = InMemoryBackend(swarm, "me", max_bytes=100)
    big, fits = Stranger(swarm), Stranger(swarm)
    big.commit(0, 0, b"x" * 101)
    fits.commit(0, 0, b"y" * 100)
    result = me.exchange(0, 0, [], timeout=0.3, body_type=Echo)
    assert result.dropped[big.peer_id] == "commits to 101 bytes, over the limit of 100"
    assert result.dropped[fits.peer_id] == "late: committed but revealed nothing before the deadline" and result.late == {fits.peer_id}


def test_a_reveal_of_another_size_or_type_does_not_match(caplog: pytest.LogCaptureFixture) -> None:
    swarm, (me,) = board("me")
    short, odd = Stranger(swarm), Stranger(swarm)
    payload = Codec().encode(short.peer_id, 0, 0, [body()])
    short.commit(0, 0, payload)
    short.reveal(0, 0, payload[:-1])
    odd.commit(0, 0, payload)
    swarm.post(0, 0, "reveal", odd.peer_id, bytearray(payload))  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="genrl_swarm.comm.base"):
        result = me.exchange(0, 0, [], timeout=0.3, body_type=Echo)
    assert result.dropped == dict.fromkeys((short.peer_id, odd.peer_id), "revealed payload does not match its commitment")
    assert f"me dropped payload from {short.peer_id} (r0/s0): revealed payload does not match its commitment" in caplog.text


def test_an_envelope_for_another_round_than_its_commitment_is_named() -> None:
    swarm, (me,) = board("me")
    liar = Stranger(swarm)
    payload = Codec().encode(liar.peer_id, 5, 1, [body()])
    liar.commit(0, 0, payload)
    liar.reveal(0, 0, payload)
    result = me.exchange(0, 0, [], timeout=0.3, body_type=Echo)
    assert result.dropped[liar.peer_id] == f"envelope says {liar.peer_id} r5/s1, its commitment {liar.peer_id} r0/s0"


def test_the_exchange_result_carries_sizes_accounts_and_own_bodies_first() -> None:
    swarm, (a, b, c) = board("a", "b", "c")
    a.claim_account("0xA")
    c.claim_account("0xC")
    out: dict[str, Any] = {}
    threads = [threading.Thread(target=lambda p: out.__setitem__(p.peer_id, p.exchange(0, 0, [body(p.peer_id)], 3.0, Echo)), args=(p,))
               for p in (a, b, c)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    size = len(Codec().encode("a", 0, 0, [body("a")]))
    for peer, result in out.items():
        assert next(iter(result.received)) == peer
        assert result.received == {p: (body(p),) for p in result.received} and sorted(result.received) == ["a", "b", "c"]
        assert result.sizes == dict.fromkeys("abc", size) and result.accounts == {"a": "0xA", "c": "0xC"}
        assert result.expected == 3 and result.dropped == {}


def test_ignored_senders_are_neither_read_nor_waited_for_nor_late() -> None:
    swarm, (me, silent) = board("me", "silent")
    bad = Stranger(swarm)
    bad.commit(0, 0, b"junk")
    start = time.monotonic()
    result = me.exchange(0, 0, [body()], timeout=5.0, body_type=Echo, ignore={"silent", bad.peer_id})
    assert time.monotonic() - start < 2
    assert result.dropped == {} and list(result.received) == ["me"] and result.expected == 1
    assert me.quarantined == frozenset({"silent", bad.peer_id})


def test_dropped_payloads_add_up_over_exchanges() -> None:
    swarm, (me,) = board("me")
    for r in range(2):
        swarm.post(r, 0, "commit", f"junk-{r}", b"\x00")
        me.exchange(r, 0, [], timeout=0.2, body_type=Echo)
    assert me.dropped_total == 2


def test_the_commit_phase_keeps_a_share_of_the_timeout_for_reveals() -> None:
    assert exchange_rules.REVEAL_SHARE == 0.25
    swarm, (me, _silent) = board("me", "silent")
    start = time.monotonic()
    me.exchange(0, 0, [], timeout=0.8, body_type=Echo)
    assert 0.55 <= time.monotonic() - start < 0.8 + 0.5


def test_the_transports_phase_deadlines_are_the_protocols(monkeypatch: pytest.MonkeyPatch) -> None:
    """One definition: the share the protocol core keeps for reveals is the one every transport
    waits by (a second copy in comm/ would still wait 3 s here)."""
    monkeypatch.setattr(exchange_rules, "REVEAL_SHARE", 0.95)
    swarm, (me, _silent) = board("me", "silent")
    start = time.monotonic()
    me.exchange(0, 0, [], timeout=4.0, body_type=Echo)
    assert time.monotonic() - start < 1.5  # the commit phase ends at 5% of 4 s; a silent member is not waited for at the reveal


def test_a_byte_backend_hosts_one_peer_per_process() -> None:
    assert [type(p) for p in NullBackend.spawn(1)] == [NullBackend]
    with pytest.raises(ValueError, match=r"^NullBackend hosts one peer per process \(swarm.num_peers=3\)$"):
        NullBackend.spawn(3)


def test_named_peers_are_verified_under_their_announced_key() -> None:
    swarm, (me, other) = board("me", "other")
    message = b"m"
    assert me.verify("other", message, other.identity.sign(message))
    assert not me.verify("other", message, me.identity.sign(message))
    stranger = Identity.generate()
    assert me.verify(stranger.peer_id, message, stranger.sign(message))  # an id embedding its key


# ------------------------------------------------------------------------------ null
def test_null_backend_defaults() -> None:
    null = NullBackend(max_bytes=1000)
    assert null.peer_id == "peer-0" and null.codec.max_bytes == 1000 and not NullBackend.in_process
    assert InMemoryBackend.in_process
    result = null.exchange(3, 1, [body()], timeout=0.1, body_type=Echo)
    assert result.received == {"peer-0": (body(),)} and result.dropped == {} and result.expected == 1


# ------------------------------------------------------------------------------ in-memory board
def test_spawn_names_peers_and_passes_options() -> None:
    comms = InMemoryBackend.spawn(3, max_bytes=77)
    assert [c.peer_id for c in comms] == ["peer-0", "peer-1", "peer-2"]
    assert all(c.codec.max_bytes == 77 and c.swarm is comms[0].swarm for c in comms)  # type: ignore[attr-defined]


def test_only_the_member_posts_in_its_slot_and_only_once() -> None:
    swarm, (me,) = board("me")
    with pytest.raises(PermissionError, match="^only me can post as me$"):
        swarm.post(0, 0, "commit", "me", b"x")
    swarm.post(0, 0, "commit", "me", b"first", me._handle)
    swarm.post(0, 0, "commit", "me", b"second", me._handle)
    assert swarm.collect(0, 0, "commit", timeout=0) == {"me": b"first"}


def test_collect_waits_for_the_wanted_members_only() -> None:
    swarm, (a, b) = board("a", "b")
    swarm.post(0, 0, "commit", "a", b"x", a._handle)
    start = time.monotonic()
    assert swarm.collect(0, 0, "commit", 5.0, wait_for={"a"}) == {"a": b"x"}
    assert swarm.collect(0, 0, "commit", 0.2) == {"a": b"x"}  # default: every member, until the deadline
    assert 0.15 <= time.monotonic() - start < 2


def test_a_member_leaving_ends_the_wait_for_it() -> None:
    swarm, (a, b) = board("a", "b")
    swarm.post(0, 0, "commit", "a", b"x", a._handle)
    threading.Timer(0.2, b.close).start()
    start = time.monotonic()
    swarm.collect(0, 0, "commit", 10.0)
    assert time.monotonic() - start < 2 and swarm.members == {"a"}


def test_commitments_after_a_members_reveal_are_not_collected() -> None:
    swarm, (a,) = board("a")
    swarm.post(0, 0, "commit", "early", b"1")
    swarm.post(0, 0, "reveal", "stranger", b"r")  # a stranger's reveal closes nothing
    swarm.post(0, 0, "commit", "middle", b"2")
    swarm.post(0, 0, "reveal", "a", b"r", a._handle)  # a member's reveal before its own commitment closes nothing
    swarm.post(0, 0, "commit", "a", b"c", a._handle)
    swarm.post(0, 0, "commit", "b4", b"3")
    swarm.post(1, 0, "reveal", "a", b"r", a._handle)  # the next stage's reveal closes nothing here
    assert list(swarm.collect(0, 0, "commit", timeout=0, wait_for=set())) == ["early", "middle", "a", "b4"]
    swarm.post(0, 0, "reveal", "a", b"again", a._handle)  # write-once: its first reveal stays, closing nothing
    a.swarm._boards[(0, 0, "reveal")].pop("a")
    swarm.post(0, 0, "reveal", "a", b"r", a._handle)  # after its commitment: closes the window
    swarm.post(0, 0, "commit", "late", b"3")
    assert list(swarm.collect(0, 0, "commit", timeout=0, wait_for=set())) == ["early", "middle", "a", "b4"]
    assert set(swarm.collect(0, 1, "commit", timeout=0, wait_for=set())) == set()


def test_missing_members_are_reported_for_the_commit_phase_only() -> None:
    swarm, (a, b, c) = board("a", "b", "c")
    b._exchange_bytes(0, 0, "commit", b"b", 0.0)
    raw = a._exchange_bytes(0, 0, "commit", b"a", 0.1)
    assert raw.missing == frozenset({"c"}) and raw.expected == 3 and set(raw.payloads) == {"a", "b"}
    a.quarantined = frozenset({"c"})
    assert a._exchange_bytes(0, 0, "commit", b"a", 0.0).missing == frozenset() and a._exchange_bytes(0, 0, "commit", b"a", 0.0).expected == 2
    assert a._exchange_bytes(0, 0, "reveal", b"a", 0.1, wait_for={"a", "c"}).missing == frozenset()
    start = time.monotonic()
    a._exchange_bytes(0, 1, "reveal", b"a", 5.0, wait_for={"a"})  # waits only for whom it is told
    assert time.monotonic() - start < 2


def test_a_sender_holds_a_bounded_number_of_boards_oldest_dropped_first() -> None:
    swarm = InMemorySwarm(max_boards_per_sender=3)
    for r in range(4):
        swarm.post(r, 0, "commit", "x", b"%d" % r)
    assert [r for r in range(4) if swarm.collect(r, 0, "commit", 0, set())] == [1, 2, 3]
    assert len(swarm._posted) == 3


def test_old_rounds_are_pruned_by_where_the_members_play() -> None:
    swarm, (a, b) = board("a", "b")
    for r in range(7):
        swarm.post(r, 1, "commit", "a", b"a", a._handle)
    swarm.post(2, 0, "commit", "b", b"b", b._handle)
    swarm.post(2, 0, "reveal", "b", b"b", b._handle)
    assert swarm._revealed == {(2, 0): 9}
    swarm.post(6, 0, "commit", "b", b"b", b._handle)  # both members at round 6: rounds < 2 go
    assert sorted({s[0] for s in swarm._boards}) == [2, 3, 4, 5, 6]
    assert all(slot[0] >= 2 for slot, _ in swarm._posted) and (2, 0) in swarm._revealed
    swarm.post(7, 0, "commit", "b", b"b", b._handle)
    swarm.post(7, 0, "commit", "a", b"a", a._handle)
    assert 2 not in {s[0] for s in swarm._boards} and swarm._revealed == {}


def test_a_stranger_does_not_hold_the_boards_back() -> None:
    swarm, (a,) = board("a")
    swarm.post(0, 0, "commit", "stranger", b"s")
    for r in range(1, 6):
        swarm.post(r, 0, "commit", "a", b"a", a._handle)
    assert swarm.collect(0, 0, "commit", 0, set()) == {} and swarm._playing == {"a": 5}


# ------------------------------------------------------------------------------ HiveMind membership
@dataclass
class Item:
    value: Any
    expiration_time: float


class FakeDHT:
    """The three calls Membership makes on hivemind's DHT, answered in process (a stand-in: the
    real DHT runs p2pd daemons). Stores are keyed like hivemind's: key -> subkey -> item."""

    def __init__(self) -> None:
        self.alive, self.accept, self.hang = True, True, False
        self.data: dict[str, dict[Any, Item]] = {}
        self.stores: list[tuple[str, Any, float]] = []
        self.answer: Any = ...  # when set, what get() answers instead

    def is_alive(self) -> bool:
        return self.alive

    def _done(self, value: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if not self.hang:
            future.set_result(value)
        return future

    def store(self, key: str, value: bytes, expiration: float, subkey: Any, return_future: bool) -> Any:
        assert return_future
        self.stores.append((key, subkey, expiration))
        self.data.setdefault(key, {})[subkey] = Item(value, expiration)
        return self._done(self.accept)

    def get(self, key: str, latest: bool, return_future: bool) -> Any:
        assert latest and return_future
        if self.answer is not ...:
            return self._done(self.answer)
        items = self.data.get(key)
        return self._done(None if items is None else Item(dict(items), 0.0))


def membership(dht: FakeDHT, identity: Identity | None = None, liveness: float = 3.0, **kwargs: Any) -> Any:
    from genrl_swarm.comm.hivemind.membership import Membership
    from genrl_swarm.comm.hivemind.peers import AddressBook

    identity = identity or Identity.generate()
    args = {"swarm": "s", "maddrs": [f"/ip4/127.0.0.1/tcp/{i}/p2p/{identity.peer_id}" for i in range(10)],
            "call_timeout": 0.5, "round_of": lambda: 4, "sightings": {}, **kwargs}  # fmt: skip
    book = AddressBook(None, identity.peer_id)
    return Membership(dht, identity, args["swarm"], args["maddrs"], liveness, args["call_timeout"], args["round_of"], book, args["sightings"])


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The membership module's log lines, whole: a check on a substring misses a changed message."""
    return [r.getMessage() for r in caplog.records if r.name == "genrl_swarm.comm.hivemind.membership"]


def test_the_transports_member_view_and_the_simulators_agree_on_who_is_alive() -> None:
    """One liveness rule (protocol.view.alive): a record, a later sighting, a departure, and the
    edge of the timeout give the same live set in the transport's view and the simulator's."""
    from genrl_swarm.comm.hivemind.members import MemberRecord, MemberView
    from genrl_swarm.protocol import LiveView

    issued = {"a": 10.0, "b": 8.0, "c": 10.0, "d": 4.0}
    records = {p: MemberRecord("s", p, 0, t, t + 3.0, (), 1, leaving=p == "c") for p, t in issued.items()}
    sightings = {"d": 9.0}  # traffic from d after its last record
    view = LiveView(3.0)
    for p, r in records.items():
        view.record(p, r.round, r.issued, leaving=r.leaving)
    for p, t in sightings.items():
        view.sighted(p, t)
    for now in (10.0, 11.0, 12.0, 13.0, 13.5):
        assert sorted(MemberView(records).live(3.0, sightings, now)) == view.live(now), now
    assert view.live(11.0) == ["a", "b", "d"] and view.live(12.0) == ["a", "d"] and view.live(13.0) == ["a"]


def test_membership_publishes_a_signed_record_others_can_read() -> None:
    from genrl_swarm.comm.hivemind.members import members_key

    dht = FakeDHT()
    a, b = membership(dht), membership(dht)
    assert (a.renew_every, a.read_every, len(a.maddrs)) == (1.0, 0.75, 8)
    a.publish()
    ((key, subkey, expires),) = dht.stores
    assert key == members_key("s") == a.key and subkey == a.peer_id and 2.5 < expires - time.time() <= 3.0
    record = b.read()[a.peer_id]
    assert (record.round, record.maddrs, record.incarnation, record.leaving) == (4, a.maddrs, a.incarnation, False)
    assert a._published == (4, record.issued) and abs(record.expires - record.issued - 3.0) < 1e-6


def test_membership_read_skips_what_does_not_open() -> None:
    dht = FakeDHT()
    a = membership(dht)
    a.publish()
    dht.data[a.key]["forged"] = Item(b"junk", 0.0)
    dht.data[a.key][Identity.generate().peer_id] = Item(dht.data[a.key][a.peer_id].value, 0.0)  # a's record under another id
    assert list(a.read()) == [a.peer_id]
    for answer in (None, Item(b"not a dict", 0.0)):
        dht.answer = answer
        assert a.read() == {}


def test_membership_calls_need_a_running_dht_and_have_a_deadline() -> None:
    from genrl_swarm.comm.errors import SwarmFailure

    dht = FakeDHT()
    a = membership(dht, call_timeout=0.1)
    dht.hang = True
    with pytest.raises(TimeoutError, match=r"^the DHT did not answer within 0.1s$"):
        a.read()
    dht.alive = False
    with pytest.raises(SwarmFailure, match="^the DHT process is not running$"):
        a.read()


def test_a_refused_store_still_counts_as_published(caplog: pytest.LogCaptureFixture) -> None:
    dht = FakeDHT()
    dht.accept = False
    a = membership(dht)
    with caplog.at_level(logging.DEBUG, logger="genrl_swarm.comm.hivemind.membership"):
        a.publish()
    assert messages(caplog) == [f"{a.peer_id}: the DHT did not take this peer's membership record"] and a._published is not None


def test_refresh_logs_joins_and_departures_and_fills_the_address_book(caplog: pytest.LogCaptureFixture) -> None:
    dht = FakeDHT()
    a, b, c = membership(dht), membership(dht), membership(dht)
    for m in (a, b, c):
        m.publish()
    with caplog.at_level(logging.INFO, logger="genrl_swarm.comm.hivemind.membership"):
        a.refresh()
    assert set(a.live()) == {a.peer_id, b.peer_id, c.peer_id}
    assert sorted(messages(caplog)) == sorted(f"{a.peer_id}: peer {p.peer_id} joined (round 4)" for p in (b, c))
    assert set(a.book._entries) == {b.peer_id, c.peer_id} and a.book._entries[b.peer_id][1] == b.maddrs
    caplog.clear()
    b.publish(leaving=True)
    a.liveness = 0.0  # c is known from the earlier read, but not heard of since
    with caplog.at_level(logging.INFO, logger="genrl_swarm.comm.hivemind.membership"):
        a.refresh()
    assert f"{a.peer_id}: peer {b.peer_id} left; no longer waited for" in messages(caplog)
    assert any(m.startswith(f"{a.peer_id}: peer {c.peer_id} stopped renewing its membership (last heard of ") for m in messages(caplog))
    caplog.clear()
    a.refresh()
    assert "no longer waited for" not in caplog.text  # once per change


def test_refresh_forgets_long_gone_members_and_sightings() -> None:
    dht = FakeDHT()
    a = membership(dht, liveness=3.0)
    a.sightings.update({"gone": time.time() - 60.5, "recent": time.time() - 59.5})
    a.refresh()
    assert set(a.sightings) == {"recent"}
    b = membership(FakeDHT(), liveness=4.0)  # forget after max(60, 20 x liveness) = 80 s
    b.sightings.update({"gone": time.time() - 81.0, "recent": time.time() - 79.0})
    b.refresh()
    assert set(b.sightings) == {"recent"}


def test_the_background_loop_renews_and_reads_until_closed() -> None:
    dht, rounds = FakeDHT(), [4]
    a = membership(dht, liveness=0.2, round_of=lambda: rounds[0])
    other = membership(dht)
    other.publish()
    a.start()
    try:
        deadline = time.monotonic() + 5
        while other.peer_id not in a.live() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert other.peer_id in a.live()
        rounds[0] = 9
        while a._published[0] != 9 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert a._published[0] == 9  # a new round is announced
        renewals = sum(1 for _, sub, _ in dht.stores if sub == a.peer_id)
        time.sleep(0.3)
        assert sum(1 for _, sub, _ in dht.stores if sub == a.peer_id) > renewals  # renewed on time
    finally:
        a.close()
    assert not a._thread.is_alive() and a.read()[a.peer_id].leaving


def test_close_without_announcing_publishes_nothing() -> None:
    dht = FakeDHT()
    a = membership(dht)
    a.publish()
    a.close(announce=False)
    assert len(dht.stores) == 1
    never = membership(dht)
    never.close()  # never published: nothing to withdraw
    assert len(dht.stores) == 1


def test_a_failing_leave_announcement_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    dht = FakeDHT()
    a = membership(dht, call_timeout=0.05)
    a.publish()
    dht.hang = True
    with caplog.at_level(logging.DEBUG, logger="genrl_swarm.comm.hivemind.membership"):
        a.close()
    assert messages(caplog) == [f"{a.peer_id}: could not announce leaving: the DHT did not answer within 0.1s"]


def test_the_loop_stops_when_the_dht_process_dies() -> None:
    dht = FakeDHT()
    a = membership(dht, liveness=0.1)
    a._thread.start()
    dht.alive = False
    a._thread.join(2)
    assert not a._thread.is_alive()


def test_a_failing_pass_of_the_loop_is_retried(caplog: pytest.LogCaptureFixture) -> None:
    dht = FakeDHT()
    a = membership(dht, liveness=0.1, call_timeout=0.02)
    dht.hang = True
    with caplog.at_level(logging.DEBUG, logger="genrl_swarm.comm.hivemind.membership"):
        a._thread.start()
        time.sleep(0.2)
        dht.hang = False
        time.sleep(0.2)
        a.close(announce=False)
    assert f"{a.peer_id}: membership update failed: TimeoutError: the DHT did not answer within 0.0s" in messages(caplog)
    assert a._published is not None


def test_a_twin_renewing_the_same_identity_is_refused() -> None:
    from genrl_swarm.comm.errors import SwarmFailure

    dht, me = FakeDHT(), Identity.generate()
    twin = membership(dht, identity=me, liveness=0.4)
    twin.publish()
    renewing = threading.Timer(0.15, twin.publish)
    renewing.start()
    every = re.escape(", ".join(twin.maddrs))
    with pytest.raises(SwarmFailure, match=rf"^identity {me.peer_id} is already used by a running peer \(it renewed its membership from {every}\): "):
        membership(dht, identity=me, liveness=0.4)._check_identity_free()
    renewing.join()


def test_a_stale_or_leaving_record_of_this_identity_does_not_block(caplog: pytest.LogCaptureFixture) -> None:
    dht, me = FakeDHT(), Identity.generate()
    old = membership(dht, identity=me, liveness=0.3)
    old.publish()
    start = time.monotonic()
    with caplog.at_level(logging.INFO, logger="genrl_swarm.comm.hivemind.membership"):
        membership(dht, identity=me, liveness=0.3)._check_identity_free()  # not renewed: waits it out
    assert 0.25 < time.monotonic() - start < 2
    (waited,) = messages(caplog)
    assert re.fullmatch(rf"{me.peer_id}: a membership record of this identity is 0\.\ds old; waiting until it expires or is renewed", waited)
    old.publish(leaving=True)
    start = time.monotonic()
    membership(dht, identity=me, liveness=0.3)._check_identity_free()
    time.sleep(0.35)
    membership(dht, identity=me, liveness=0.3)._check_identity_free()  # now old as well
    assert time.monotonic() - start < 0.6


def test_membership_thread_is_a_named_daemon() -> None:
    """A daemon, so a peer that forgets close() still exits; named after the peer, so a stack dump
    of a hung process says whose loop it is."""
    a = membership(FakeDHT())
    assert a._thread.daemon is True and a._thread.name == f"members-{a.peer_id[-6:]}"


def test_read_skips_an_answer_item_without_a_value() -> None:
    dht = FakeDHT()
    a = membership(dht)
    a.publish()
    dht.data[a.key][Identity.generate().peer_id] = object()  # not an item hivemind would hand back
    assert list(a.read()) == [a.peer_id]


def test_tick_renews_only_when_due_or_when_the_round_changed() -> None:
    dht, rounds = FakeDHT(), [4]
    a = membership(dht, liveness=3.0, round_of=lambda: rounds[0])  # renew every 1 s
    a.tick()  # never published: publishes now
    assert len(dht.stores) == 1 and a._published[0] == 4
    a.tick()
    assert len(dht.stores) == 1  # fresh, same round: only read
    a._published = (4, time.time() - 1.05)
    a.tick()
    assert len(dht.stores) == 2  # due
    rounds[0] = 5
    a.tick()
    assert len(dht.stores) == 3 and a._published[0] == 5  # a new round is announced at once


def signed_record(who: Identity, issued: float, leaving: bool = False) -> Any:
    from genrl_swarm.comm.hivemind.members import MemberRecord

    return MemberRecord("s", who.peer_id, 4, issued, issued + 3.0, (f"/ip4/127.0.0.1/tcp/1/p2p/{who.peer_id}",), 7, leaving)


@pytest.mark.parametrize(("record_age", "sighting_age", "heard"), [(5.0, 4.0, 4.0), (5.0, 6.0, 5.0), (5.0, None, 5.0)])
def test_a_quiet_member_is_reported_with_when_it_was_last_heard_of(
    caplog: pytest.LogCaptureFixture, record_age: float, sighting_age: float | None, heard: float
) -> None:
    """Last heard of = the newer of its record and the last traffic seen from it."""
    from genrl_swarm.comm.hivemind.members import MemberView

    b = Identity.generate()
    a = membership(FakeDHT(), liveness=3.0)
    now = time.time()
    a.view = MemberView({b.peer_id: signed_record(b, now - record_age)})
    a._alive_logged = frozenset({b.peer_id})
    if sighting_age is not None:
        a.sightings[b.peer_id] = now - sighting_age
    with caplog.at_level(logging.INFO, logger="genrl_swarm.comm.hivemind.membership"):
        a.refresh()
    (line,) = messages(caplog)
    found = re.fullmatch(
        rf"{a.peer_id}: peer {b.peer_id} stopped renewing its membership \(last heard of (\d+\.\d)s ago\); no longer waited for", line
    )
    assert found and abs(float(found.group(1)) - heard) < 0.35, line


def test_a_member_forgotten_while_the_dht_was_unreachable_is_reported_without_an_age(caplog: pytest.LogCaptureFixture) -> None:
    from genrl_swarm.comm.hivemind.members import MemberView

    b = Identity.generate()
    a = membership(FakeDHT(), liveness=0.1)  # forgotten after 60 s
    a.view = MemberView({b.peer_id: signed_record(b, time.time() - 60.5)})
    a._alive_logged = frozenset({b.peer_id})
    with caplog.at_level(logging.INFO, logger="genrl_swarm.comm.hivemind.membership"):
        a.refresh()
    assert messages(caplog) == [f"{a.peer_id}: peer {b.peer_id} stopped renewing its membership; no longer waited for"]
    assert a.view.records == {}


def test_a_twin_without_addresses_is_named_as_such() -> None:
    from genrl_swarm.comm.errors import SwarmFailure

    dht, me = FakeDHT(), Identity.generate()
    twin = membership(dht, identity=me, liveness=0.4, maddrs=[])
    twin.publish()
    renewing = threading.Timer(0.15, twin.publish)
    renewing.start()
    with pytest.raises(SwarmFailure, match=r"\(it renewed its membership from an unknown address\): stop that peer, or "):
        membership(dht, identity=me, liveness=0.4)._check_identity_free()
    renewing.join()


def test_close_does_not_wait_for_a_stuck_loop_beyond_its_deadline() -> None:
    """close() waits call_timeout + 1 s for the loop, not for whatever it is stuck in."""
    release = threading.Event()
    entered = threading.Event()

    def stuck_round() -> int:
        entered.set()
        release.wait(5)
        return 4

    a = membership(FakeDHT(), liveness=0.1, call_timeout=0.05, round_of=stuck_round)
    a._thread.start()
    try:
        assert entered.wait(3)
        start = time.monotonic()
        a.close(announce=False)
        assert time.monotonic() - start < 1.5
    finally:
        release.set()
        a._thread.join(6)


def test_a_peer_late_once_is_received_again_beside_a_member_that_stays_silent() -> None:
    """The in-memory board: b misses round 0, c never commits; c's silence must not spend b's
    short wait (before: a never received b again while c stayed). In round 1 b still waits out c
    once itself; from round 2 on a receives b at every stage."""
    swarm, (a, b, _) = board("a", "b", "c")
    a.exchange(0, 0, [body()], timeout=0.5, body_type=Echo)  # b sits round 0 out; c never plays
    for round in (1, 2, 3):
        for stage in (0, 1):
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                mine = pool.submit(a.exchange, round, stage, [body()], 0.5, Echo)
                pool.submit(b.exchange, round, stage, [body()], 0.5, Echo).result()
            result = mine.result()
            assert round == 1 or "b" in result.received and result.late == {"c"}, (round, stage, result.dropped)


def test_an_honest_peer_a_little_behind_is_received_again_after_one_miss() -> None:
    """h misses round 0, then starts every exchange 0.3 of the timeout after a: more than its short
    wait, well within the full one. A short miss no longer renews its late mark (review: it was
    never received again), so at its probe round a waits for it in full once and it is back."""
    from genrl_swarm.core.trust import waited_for_again

    _, (a, h) = board("a", "h")
    timeout = 1.0
    a.exchange(0, 0, [body()], timeout=timeout, body_type=Echo)  # h sits round 0 out
    received = []
    for round in range(1, waited_for_again(0) + 2):
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            mine = pool.submit(a.exchange, round, 0, [body()], timeout, Echo)
            time.sleep(0.3 * timeout)
            pool.submit(h.exchange, round, 0, [body()], timeout, Echo).result()
        received.append("h" in mine.result().received)
    assert received[-2:] == [True, True], received
