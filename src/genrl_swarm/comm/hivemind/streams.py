"""Payloads over libp2p streams: each peer serves its own bytes per (round, stage, phase), and
pulls everyone else's.

A pull is a long poll. The requester asks the member's handler for a slot; the handler answers
at once if it has the bytes, or waits (bounded) until it does. The question travels as a unary
call over p2pd's persistent connection (half the latency of a new stream); an answer larger than
``UNARY_MAX`` comes over a stream of its own instead (unary messages are capped and slower). It answers
"gone" if it has moved past that slot and "behind" if it is more than a round behind it, so
nobody waits for a slot that will not come. The sender of the bytes is the peer the call or
stream was opened to: libp2p authenticates the remote end of both, so a peer can only ever speak
for itself, whatever its bytes claim.

A second protocol serves payloads by digest (``serve_held``, ``request_held``): what a peer
holds of others' revealed payloads, for a peer whose view lacks one (``core.views``). Its answer
is checked by the asker against the digest, so who serves it does not matter.

Everything here runs on the backend's event loop (``LoopThread``); every await has a deadline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import struct
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

log = logging.getLogger(__name__)
Slot = tuple[int, int, str]  # round, stage, phase
PHASES = ("commit", "reveal")
VERSION = 2
#: version, round, stage, phase index, how long the requester waits (ms): fixed size, so the
#: handler reads exactly this many bytes from a stranger and no more.
REQUEST = struct.Struct(">BqIBI")
LENGTH = struct.Struct(">Q")
#: version, sha256 of the payload wanted: the request of the held protocol, fixed size too.
HELD = struct.Struct(">B32s")
#: How long a handler keeps one long poll open; the requester asks again if its deadline allows.
MAX_SERVE_WAIT = 30.0
#: How long a requester's one long poll asks to be held: a slot of the puller's concurrency is
#: free again after at most this, so peers that hold their answer back (a crowd of Sybil members
#: sorted first) cannot keep honest peers from ever being asked (review: 100 such held all 32).
POLL_SLICE = 1.0
#: Seconds an answer's first byte may take beyond the long poll it was asked for (a loaded
#: machine's round trip): a server that ignores the wait gives its pull slot back after this.
ANSWER_GRACE = 1.0
#: Bytes a second a stream's transfer must keep up once its header came (after ANSWER_GRACE) while
#: other asks wait for a pull slot: one that trickles its bytes gives its slot back and is asked
#: again later, held to half the rate then (a slow honest link gets through on a later ask). With
#: no ask waiting, a transfer runs on to the deadline: a slow honest link is not cut for nothing
#: (review: restarted from byte 0 each time, it was never received).
MIN_RATE = 256 * 1024
#: Seconds between looks at a transfer below MIN_RATE while no ask waits for its slot.
SLOW_LOOK = 0.25
CHUNK = 64 * 1024
IO_TIMEOUT = 30.0
#: A stream must say what it wants this fast: idle streams cost this process a file descriptor
#: each (one hostile peer opened 1,100 and cut an honest peer off at the usual 1,024 limit).
REQUEST_TIMEOUT = 2.0
MAX_STREAMS_PER_PEER = 4  # open at once from one remote peer; the rest are closed unread
MAX_STREAMS = 256  # open at once in total
UNARY_MAX = 64 * 1024
#: How long a handler more than a round behind the slot waits before saying so: two peers that
#: jump to a new round together post within moments of each other.
BEHIND_GRACE = 2.0


class Status(enum.IntEnum):
    DATA = 0  # the bytes follow
    LATER = 1  # not posted yet; ask again
    GONE = 2  # this peer moved past the slot: it will never post it
    BEHIND = 3  # this peer is more than a round behind the slot (after BEHIND_GRACE): do not wait for it
    STREAM = 4  # too large for a unary answer: ask again over a stream


class ProtocolError(ValueError):
    """A peer answered something that is not this protocol (unknown status, oversized)."""


#: peer id -> when (time.time()) it last talked to us over a stream or call: proof it is alive
#: even when its membership renewals are slow to show up on a busy DHT.
Sightings = dict[str, float]


class SlotStore:
    """This peer's own bytes per slot for the last ``keep_rounds`` rounds, and the pulls
    waiting for them. Lives on the event loop. Every request is a sighting of its sender."""

    def __init__(self, sightings: Sightings, keep_rounds: int = 4) -> None:
        self.sightings, self.keep_rounds = sightings, keep_rounds
        self.latest: tuple[int, int] | None = None  # (round, stage) of the newest post
        self.streams: Counter[str] = Counter()  # remote peer -> streams it has open here
        self._slots: dict[Slot, bytes] = {}
        self._posted = asyncio.Event()

    def put(self, slot: Slot, data: bytes) -> None:
        self._slots[slot] = data
        if self.latest is None or slot[:2] > self.latest:
            self.latest = (slot[0], slot[1])
        for old in [s for s in self._slots if s[0] < self.latest[0] - self.keep_rounds]:
            del self._slots[old]
        posted, self._posted = self._posted, asyncio.Event()
        posted.set()

    def status(self, slot: Slot) -> tuple[Status, bytes]:
        if slot in self._slots:
            return Status.DATA, self._slots[slot]
        if self.latest is None:
            return Status.LATER, b""
        if slot[:2] < self.latest:
            return Status.GONE, b""
        if slot[0] > self.latest[0] + 1:
            return Status.BEHIND, b""
        return Status.LATER, b""

    async def wait(self, slot: Slot, timeout: float) -> tuple[Status, bytes]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        end = start + timeout
        while True:
            status, data = self.status(slot)
            if status is Status.BEHIND:
                end = min(end, start + BEHIND_GRACE)
            left = end - loop.time()
            if status in (Status.DATA, Status.GONE) or left <= 0:
                return status, data
            try:
                await asyncio.wait_for(self._posted.wait(), left)
            except asyncio.TimeoutError:
                continue  # the next status() decides; `left` is now <= 0


async def serve_unary(store: SlotStore, request: bytes, remote: Any) -> bytes:
    """The unary handler: status byte, then the bytes if they are small. A malformed request
    raises here, and p2pd hands the caller an error."""
    version, round, stage, phase, wait_ms = REQUEST.unpack(request)
    store.sightings[str(remote)] = time.time()
    if version != VERSION or phase >= len(PHASES):
        raise ProtocolError(f"not a version {VERSION} slot request")
    status, data = await store.wait((round, stage, PHASES[phase]), min(wait_ms / 1000, MAX_SERVE_WAIT))
    if status is Status.DATA and len(data) > UNARY_MAX:
        return bytes([Status.STREAM])
    return bytes([status]) + data


async def serve(store: SlotStore, info: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The stream handler: read one fixed-size request, answer from ``store``. Streams beyond
    the per-peer and total caps are closed unread."""
    peer = str(getattr(info, "peer_id", "?"))
    if store.streams[peer] >= MAX_STREAMS_PER_PEER or sum(store.streams.values()) >= MAX_STREAMS:
        writer.close()
        return
    store.streams[peer] += 1
    try:
        await _serve(store, info, reader, writer)
    finally:
        store.streams[peer] -= 1
        if store.streams[peer] <= 0:
            del store.streams[peer]


async def _serve(store: SlotStore, info: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        request = await asyncio.wait_for(reader.readexactly(REQUEST.size), REQUEST_TIMEOUT)
        version, round, stage, phase, wait_ms = REQUEST.unpack(request)
        store.sightings[str(info.peer_id)] = time.time()
        if version != VERSION or phase >= len(PHASES):
            return
        status, data = await store.wait((round, stage, PHASES[phase]), min(wait_ms / 1000, MAX_SERVE_WAIT))
        writer.write(bytes([status]))
        if status is Status.DATA:
            writer.write(LENGTH.pack(len(data)))
            writer.write(data)
        await asyncio.wait_for(writer.drain(), IO_TIMEOUT)
    except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError) as e:
        log.debug("serving %s: %s", getattr(info, "peer_id", "?"), e)
    except asyncio.CancelledError:  # this peer is closing while a long poll waits: nothing to report
        log.debug("serving %s: cancelled (closing)", getattr(info, "peer_id", "?"))
    finally:
        writer.close()


async def serve_held(
    store: SlotStore, held: Callable[[bytes], bytes | None], info: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """The held protocol's handler: read one digest, answer ``DATA`` and the payload this peer
    holds for it (``comm.held``), or ``GONE``. Counted against the same stream caps as ``serve``."""
    peer = str(getattr(info, "peer_id", "?"))
    if store.streams[peer] >= MAX_STREAMS_PER_PEER or sum(store.streams.values()) >= MAX_STREAMS:
        writer.close()
        return
    store.streams[peer] += 1
    try:
        version, digest = HELD.unpack(await asyncio.wait_for(reader.readexactly(HELD.size), REQUEST_TIMEOUT))
        data = held(digest) if version == VERSION else None
        writer.write(bytes([Status.GONE]) if data is None else bytes([Status.DATA]) + LENGTH.pack(len(data)) + data)
        await asyncio.wait_for(writer.drain(), IO_TIMEOUT)
    except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError) as e:
        log.debug("serving a held payload to %s: %s", peer, e)
    except asyncio.CancelledError:
        log.debug("serving a held payload to %s: cancelled (closing)", peer)
    finally:
        store.streams[peer] -= 1
        if store.streams[peer] <= 0:
            del store.streams[peer]
        writer.close()


async def request_held(p2p: Any, peer: Any, proto: str, digest: bytes, limit: int) -> bytes | None:
    """Ask ``peer`` (a hivemind PeerID) for the payload with sha256 ``digest``, at most ``limit``
    bytes: the bytes, or None if it does not hold them. The caller bounds the time and checks
    the digest."""
    _, reader, writer = await p2p.call_binary_stream_handler(peer, proto)
    try:
        writer.write(HELD.pack(VERSION, digest))
        await writer.drain()
        status = _status((await reader.readexactly(1))[0])
        if status is not Status.DATA:
            return None
        (size,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
        if size > limit:
            raise ProtocolError(f"offers {size} bytes for a payload of {limit}")
        data: bytes = await reader.readexactly(size)
        return data
    finally:
        writer.close()


def _status(code: int) -> Status:
    if code not in Status._value2member_map_:
        raise ProtocolError(f"unknown status {code}")
    return Status(code)


@dataclasses.dataclass
class Progress:
    """What a running ask has shown: when its header came (loop time) and the bytes since."""

    header_at: float | None = None
    got: int = 0


async def request(p2p: Any, peer: Any, proto: str, slot: Slot, wait: float, limit: int) -> tuple[Status, bytes]:
    """One pull of ``slot`` from ``peer`` (a hivemind PeerID) as a unary call, all or nothing. An
    answer too large for one comes back as ``Status.STREAM``: ask again with ``request_stream``."""
    answer = await p2p._client.call_unary_handler(peer, f"{proto}/unary", _question(slot, wait))
    if not answer:
        raise ProtocolError(f"empty answer for {slot}")
    status = _status(answer[0])
    if len(answer) - 1 > min(limit, UNARY_MAX):
        raise ProtocolError(f"answered {len(answer) - 1} bytes for {slot}, over the limit of {min(limit, UNARY_MAX)}")
    return status, answer[1:]


async def request_stream(p2p: Any, peer: Any, proto: str, slot: Slot, wait: float, limit: int, progress: Progress) -> tuple[Status, bytes]:
    """Pull ``slot`` over a stream of its own, a long poll of ``wait`` seconds: for an answer
    known to be large (the peer said so, or committed to that many bytes), one round trip
    fewer than asking over a unary call first. ``progress`` shows the transfer to the puller."""
    _, reader, writer = await p2p.call_binary_stream_handler(peer, proto)
    try:
        writer.write(_question(slot, wait))
        await writer.drain()
        status = _status((await reader.readexactly(1))[0])
        if status is Status.STREAM:  # asked over a stream already: not an answer (and no spin)
            raise ProtocolError(f"answered 'stream' over a stream for {slot}")
        if status is not Status.DATA:
            progress.header_at = asyncio.get_running_loop().time()
            return status, b""
        (size,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
        progress.header_at = asyncio.get_running_loop().time()
        if size > limit:
            raise ProtocolError(f"offers {size} bytes for {slot}, over the limit of {limit}")
        chunks: list[bytes] = []
        while progress.got < size:
            chunk = await reader.read(min(CHUNK, size - progress.got))
            if not chunk:
                raise asyncio.IncompleteReadError(b"".join(chunks), size)
            chunks.append(chunk)
            progress.got += len(chunk)
        return Status.DATA, b"".join(chunks)
    finally:
        writer.close()


def _question(slot: Slot, wait: float) -> bytes:
    return REQUEST.pack(VERSION, slot[0], slot[1], PHASES.index(slot[2]), max(int(wait * 1000), 0))


@dataclasses.dataclass(frozen=True)
class _Ask:
    """What one peer is asked for, by when, and the most bytes it may answer; ``stream``: over a
    stream at once (it committed to more than ``UNARY_MAX``, or answered ``Status.STREAM``);
    ``min_rate``: what its stream must keep up while asks wait (halved each time it fell behind,
    so an honest slow link is received on a later ask even while a crowd waits for slots)."""

    slot: Slot
    deadline: float
    limit: int
    stream: bool
    min_rate: float


class Puller:
    """Pulls one slot from many peers at once, at most ``concurrency`` asks open, until each
    answered, stopped mattering (``wanted`` turns False: it left the swarm), or the deadline.

    An ask holds a slot of the concurrency only while its peer keeps up: its first byte within
    the long poll plus ``ANSWER_GRACE``, then ``MIN_RATE`` while other asks wait for a slot; a
    peer that falls behind is asked again later, behind them. Sybil members sorted first that
    hold their answers back or trickle them cannot keep an honest peer from being asked."""

    #: Failures that mean "not reachable right now" (dial refused, daemon gone, stream cut).
    ERRORS: tuple[type[BaseException], ...] = (OSError, ConnectionError, asyncio.IncompleteReadError, ProtocolError)

    def __init__(self, p2p: Any, proto: str, concurrency: int, peer_id_of: Callable[[str], Any], sightings: Sightings) -> None:
        from hivemind.p2p import P2PDaemonError, P2PHandlerError
        from hivemind.p2p.p2p_daemon_bindings.utils import ControlFailure, DispatchFailure

        self.p2p, self.proto, self.peer_id_of, self.sightings = p2p, proto, peer_id_of, sightings
        self.semaphore = asyncio.Semaphore(concurrency)
        self.queued = 0  # asks waiting for a slot
        self.errors = (*self.ERRORS, P2PDaemonError, P2PHandlerError, ControlFailure, DispatchFailure)

    async def pull(
        self,
        peers: Collection[str],
        slot: Slot,
        deadline: float,
        limit: int,
        wanted: Callable[[str], bool],
        redial: Callable[[str], Awaitable[None]],
        stop: Callable[[], bool],
        enough: int | None = None,
        sizes: Mapping[str, int] | None = None,
        until: Mapping[str, float] | None = None,
    ) -> dict[str, bytes]:
        """Bytes per peer, in arrival order. ``deadline`` is on the loop's clock. ``enough``:
        stop once that many answered with bytes (the strategy's spares are not waited for).
        ``sizes``: how many bytes some peers committed to (the reveal phase): one over
        ``UNARY_MAX`` is asked over a stream at once (never a limit: other bytes are still
        fetched, and dropped by the exchange as not matching the commitment).
        ``until``: earlier deadlines for some peers (not worth the whole wait)."""
        loop = asyncio.get_running_loop()
        got: dict[str, bytes] = {}
        sizes, until = sizes or {}, until or {}
        asks = {p: _Ask(slot, min(deadline, until.get(p, deadline)), limit, sizes.get(p, 0) > UNARY_MAX, MIN_RATE) for p in peers}
        tasks = [asyncio.create_task(self._one(p, asks[p], wanted, redial, stop, got)) for p in peers]
        want = len(tasks) if enough is None else enough
        try:
            pending = set(tasks)
            while pending and len(got) < want and not stop() and loop.time() < deadline:
                _, pending = await asyncio.wait(pending, timeout=min(deadline - loop.time(), 0.2), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
        return got

    async def _one(
        self,
        peer: str,
        ask: _Ask,
        wanted: Callable[[str], bool],
        redial: Callable[[str], Awaitable[None]],
        stop: Callable[[], bool],
        got: dict[str, bytes],
    ) -> None:
        loop, backoff = asyncio.get_running_loop(), 0.02
        while not stop():  # bounded: every pass takes a long poll or a growing pause, until the deadline
            left = ask.deadline - loop.time()
            if left <= 0.01:
                return
            asked, wait = loop.time(), min(left - 0.01, POLL_SLICE)
            try:
                self.queued += 1
                try:
                    await self.semaphore.acquire()
                finally:
                    self.queued -= 1
                progress = Progress()
                try:
                    answer = await self._ask(peer, ask, wait, progress)
                finally:
                    self.semaphore.release()
            except self.errors as e:  # TimeoutError is an OSError: a call's own timeout backs off too
                if not wanted(peer):
                    return
                log.debug("pull %s from %s: %s", ask.slot, peer, e)
                await redial(peer)
                await asyncio.sleep(min(backoff, max(ask.deadline - loop.time(), 0)))
                backoff = min(backoff * 2, 0.5)
                continue
            if answer is None:  # gave its slot back (no first byte in time, or fell behind): asked again while time is left
                if ask.stream and progress.header_at is not None:
                    ask = dataclasses.replace(ask, min_rate=ask.min_rate / 2)
                continue
            status, data = answer
            self.sightings[peer] = time.time()
            if status is Status.DATA:
                got[peer] = data
                return
            if status is Status.STREAM:
                ask = dataclasses.replace(ask, stream=True)
                continue
            if status is not Status.LATER:
                return
            if loop.time() - asked < wait / 2:  # "later" long before the wait it was asked for: do not spin
                await asyncio.sleep(min(backoff, max(ask.deadline - loop.time(), 0)))
                backoff = min(backoff * 2, 0.5)

    async def _ask(self, peer: str, ask: _Ask, wait: float, progress: Progress) -> tuple[Status, bytes] | None:
        """One ask, watched: None if it gave its slot back (see the class docstring) or the
        deadline passed; a failure of the call raises."""
        loop = asyncio.get_running_loop()
        asked = loop.time()
        if not ask.stream:  # a unary answer is all or nothing: bounded by its first byte's time
            bound = min(asked + wait + ANSWER_GRACE, ask.deadline) - asked
            try:
                return await asyncio.wait_for(request(self.p2p, self.peer_id_of(peer), self.proto, ask.slot, wait, ask.limit), bound)
            except TimeoutError:
                if loop.time() - asked < bound * 0.99:
                    raise  # the call's own timeout (an OSError): the failure path, with its pause
                return None
        task = asyncio.ensure_future(request_stream(self.p2p, self.peer_id_of(peer), self.proto, ask.slot, wait, ask.limit, progress))
        try:
            while True:
                now = loop.time()
                if progress.header_at is None:
                    look = asked + wait + ANSWER_GRACE  # no first byte by then: give the slot back
                else:
                    look = progress.header_at + ANSWER_GRACE + progress.got / ask.min_rate  # when it falls below its rate
                    if look <= now:  # behind: only matters while another ask waits for a slot
                        look = now + SLOW_LOOK if not self.queued else now
                if look <= now:
                    return None
                done, _ = await asyncio.wait({task}, timeout=min(look, ask.deadline) - now)
                if done:
                    return task.result()
                if loop.time() >= ask.deadline:
                    return None
        finally:
            if not task.done():
                task.cancel()
            elif not task.cancelled():
                task.exception()  # retrieved: a failure after we stopped listening is not logged as lost
