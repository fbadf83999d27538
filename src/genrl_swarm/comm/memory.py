"""Several peers in one process (threads): for tests, notebooks and the demo.

Payloads still go through signatures, commitments and the codec, so a game that works here
works on the wire. The board plays an authenticated transport: a member's slot can only be
written through the handle it got when joining, as a libp2p stream can only come from the key
that opened it. Strangers may post under ids of their own; the checks in ``ByteBackend`` decide.
A fetch by digest asks members one by one what they hold (``InMemoryBackend.serve_held``), as a
HiveMind peer asks over a stream: never the board, which is not what any one peer received.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from typing import Any

from genrl_swarm.comm.base import ByteBackend, HeldAsk, Phase, RawExchange
from genrl_swarm.comm.codec import DEFAULT_MAX_BYTES
from genrl_swarm.comm.epoch import Epoch
from genrl_swarm.core.identity import Identity

Slot = tuple[int, int, str]  # round, stage, phase


class InMemorySwarm:
    """The shared board peers post to; one condition variable wakes the waiters. It draws the
    swarm's epoch (``comm.epoch``): every member signs in it."""

    def __init__(self, keep_rounds: int = 4, max_boards_per_sender: int = 64, epoch: Epoch | None = None) -> None:
        self.epoch = epoch or Epoch.new()
        self.members: set[str] = set()
        self.keys: dict[str, bytes] = {}  # member -> public key, announced on joining
        self._handles: dict[str, object] = {}
        self._holders: dict[str, Callable[[bytes, str], bytes | None]] = {}  # member -> (digest, asker) -> what it holds
        self._boards: dict[Slot, dict[str, bytes]] = {}
        self._slots_of: defaultdict[str, list[Slot]] = defaultdict(list)
        self._playing: dict[str, int] = {}  # member -> latest round it posted
        #: (round, stage) -> when its first reveal was posted: commitments posted later are not
        #: collected, since their sender may have seen a payload it now claims as its own.
        self._revealed: dict[tuple[int, int], int] = {}
        self._posted: dict[tuple[Slot, str], int] = {}  # (slot, sender) -> when
        self._seq = 0
        self._cond = threading.Condition()
        self._keep_rounds, self._max_boards = keep_rounds, max_boards_per_sender
        self._interrupted = False

    def join(self, peer_id: str, public_key: bytes) -> object:
        """Add a member; returns the handle its posts must carry."""
        with self._cond:
            if peer_id in self.members:
                raise ValueError(f"peer id {peer_id!r} is already in this swarm")
            for slot in self._slots_of.pop(peer_id, []):  # a stranger's posts under this id before it joined
                self._boards.get(slot, {}).pop(peer_id, None)
                self._posted.pop((slot, peer_id), None)
            self.members.add(peer_id)
            self.keys[peer_id] = public_key
            handle = self._handles[peer_id] = object()
            return handle

    def serve(self, peer_id: str, handle: object, held: Callable[[bytes, str], bytes | None]) -> None:
        """``held(digest, asker)``: what member ``peer_id`` answers when asked for a payload by its digest."""
        with self._cond:
            if handle is not self._handles.get(peer_id):
                raise PermissionError(f"only {peer_id} can serve as {peer_id}")
            self._holders[peer_id] = held

    def held_by(self, peer_id: str, digest: bytes, asker: str) -> bytes | None:
        """Ask member ``peer_id`` for a payload by its digest (None: it does not serve it)."""
        with self._cond:
            held = self._holders.get(peer_id)
        return held(digest, asker) if held is not None else None

    def leave(self, peer_id: str) -> None:
        with self._cond:
            self.members.discard(peer_id)
            self._holders.pop(peer_id, None)
            self._playing.pop(peer_id, None)
            self._cond.notify_all()

    def post(self, round: int, stage: int, phase: Phase, sender: str, data: bytes, handle: object | None = None) -> None:
        """Publish bytes; tests also use it to play a misbehaving peer. A member's slot needs its
        handle. Boards are pruned by where the *members* play, so a post for a far-future round
        cannot push the current ones out, and each sender holds a bounded number of boards."""
        with self._cond:
            if sender in self._handles and handle is not self._handles[sender]:
                raise PermissionError(f"only {sender} can post as {sender}")
            slot = (round, stage, phase)
            board = self._boards.setdefault(slot, {})
            if sender in board:  # write-once: a commitment cannot be swapped after others revealed
                return
            self._seq += 1
            if phase == "reveal" and sender in self.members and sender in self._boards.get((round, stage, "commit"), {}):
                self._revealed.setdefault((round, stage), self._seq)  # strangers, and reveals before a commit, close nothing
            self._posted[(slot, sender)] = self._seq
            self._slots_of[sender].append(slot)
            board[sender] = data
            if sender in self.members:
                self._playing[sender] = max(self._playing.get(sender, 0), round)
            self._prune(sender)
            self._cond.notify_all()

    def _prune(self, sender: str) -> None:
        slots = self._slots_of[sender]
        while len(slots) > self._max_boards:
            slot = slots.pop(0)
            self._boards.get(slot, {}).pop(sender, None)
            self._posted.pop((slot, sender), None)
        oldest = min(self._playing.values(), default=0) - self._keep_rounds
        for slot in [s for s in self._boards if s[0] < oldest]:
            for peer in self._boards.pop(slot):
                self._posted.pop((slot, peer), None)
            self._revealed.pop(slot[:2], None)

    def interrupt(self) -> None:
        """End every wait now and from now on (the run is stopping)."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    def collect(
        self,
        round: int,
        stage: int,
        phase: Phase,
        timeout: float,
        wait_for: Collection[str] | None = None,
        patience: Mapping[str, float] | None = None,
    ) -> dict[str, bytes]:
        """Wait until everyone in ``wait_for`` (default: every member) posted for the slot or ran
        out of its own ``patience`` (seconds; default ``timeout``), or an interrupt; returns the
        board in posting order."""
        start, patience = time.monotonic(), patience or {}
        with self._cond:
            while True:
                board = self._boards.get((round, stage, phase), {})
                if phase == "commit" and (round, stage) in self._revealed:
                    cutoff, slot = self._revealed[(round, stage)], (round, stage, phase)
                    board = {p: d for p, d in board.items() if self._posted[(slot, p)] < cutoff}
                wanted = self.members if wait_for is None else set(wait_for)
                waiting = max((patience.get(p, timeout) for p in wanted - board.keys()), default=0.0)
                remaining = start + waiting - time.monotonic()
                if remaining <= 0 or self._interrupted:
                    return dict(board)
                self._cond.wait(remaining)


class InMemoryBackend(ByteBackend):
    in_process = True

    def __init__(self, swarm: InMemorySwarm, peer_id: str, max_bytes: int = DEFAULT_MAX_BYTES, identity: Identity | None = None) -> None:
        super().__init__(max_bytes, identity)
        self.swarm, self._peer_id = swarm, peer_id
        self.epoch = swarm.epoch
        self._handle = swarm.join(peer_id, self.identity.public_key)
        self.keys = swarm.keys  # members' keys, as they announced them on joining
        swarm.serve(peer_id, self._handle, self.serve_held)

    @classmethod
    def spawn(cls, num_peers: int, **kwargs: Any) -> list[ByteBackend]:
        swarm = InMemorySwarm()
        return [cls(swarm, f"peer-{i}", **kwargs) for i in range(num_peers)]

    @property
    def peer_id(self) -> str:
        return self._peer_id

    def is_member(self, peer: str) -> bool:
        return peer in self.swarm.members

    def vouches_for(self, peer: str) -> bool:
        return peer in self.swarm.members  # joined through this process's code: a stranger only posts

    def resumed_epoch(self, saved: Epoch) -> None:
        """Not taken: an in-process swarm restarts whole, so the board's fresh epoch is what
        makes replaying the rounds after the last checkpoint safe (``comm.epoch``)."""

    def agree_epoch(self) -> Epoch:
        return self.swarm.epoch

    def _exchange_bytes(
        self, round: int, stage: int, phase: Phase, data: bytes, timeout: float, wait_for: Collection[str] | None = None
    ) -> RawExchange:
        self.swarm.post(round, stage, phase, self.peer_id, data, self._handle)
        wanted = set(self.swarm.members if wait_for is None else wait_for) - self.quarantined - {self.peer_id}
        patience = {p: self.patience(p, round, timeout) for p in wanted}  # members late lately: their short wait
        got = self.swarm.collect(round, stage, phase, timeout, wanted, patience)
        self.stayed_silent({p for p in wanted - got.keys() if not self.punctual(p, round)}, round)  # not again this round
        missing = frozenset(wanted - got.keys() - {self.peer_id}) if phase == "commit" else frozenset()
        return RawExchange(got, expected=len(self.swarm.members - self.quarantined), missing=missing)

    def serve_held(self, digest: bytes, asker: str) -> bytes | None:
        """What this peer answers a fetch by digest with: a payload it holds (``comm.held``)."""
        return self.held.get(digest)

    def _fetch_bytes(self, round: int, asks: Mapping[bytes, HeldAsk], timeout: float) -> dict[bytes, bytes]:
        """Each payload from the first peer that holds it: the senders that named it, then every
        other member, quarantined ones not asked. In-process answers are immediate."""
        got: dict[bytes, bytes] = {}
        for digest, ask in asks.items():
            for peer in dict.fromkeys([*ask.first, *sorted(self.swarm.members)]):
                if peer == self.peer_id or peer in self.quarantined:
                    continue
                blob = self.swarm.held_by(peer, digest, self.peer_id)
                if blob is not None and len(blob) == ask.size and hashlib.sha256(blob).digest() == digest:
                    got[digest] = blob
                    break
        return got

    def interrupt(self) -> None:
        self.swarm.interrupt()

    def close(self) -> None:
        self.swarm.leave(self.peer_id)
