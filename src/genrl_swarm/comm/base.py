"""ByteBackend: the shared half of every backend.

A backend only moves opaque bytes (``_exchange_bytes``); signatures, commitments, encoding,
validation and dropping bad payloads happen here once, so all backends treat peers the same.

One exchange is two phases through the transport:

1. **commit**: each peer publishes a signed ``Commitment`` (sha256 and size of its payload,
   bound to swarm, epoch, round and stage). Signatures are checked before anything is parsed.
2. **reveal**: each peer publishes its payload. A payload counts only if its sender committed
   to exactly these bytes in phase 1, so nobody can re-send a payload it saw revealed as its
   own, and the order of commitments says who produced identical content first.

Signed commitments are also what later stages refer to: a payload carries the commitments of
the earlier payloads its inputs were built from (``Envelope.basis``). Every commitment of this
run this peer sees, in a phase or passed on, is remembered for a few rounds; two validly signed
ones by one sender for one (epoch, round, stage) that differ are a proof of equivocation, which
this peer acts on and passes on (``Envelope.evidence``): ``comm.commitments``. The epoch (the
run, ``comm.epoch``) is settled before this peer's first signature and kept in its run
directory, beside the log of what it signed last (``comm.signed_log``).

Fetching: every payload this peer revealed or received (matching its commitment) is held for a
round or two (``comm.held``) and served by its digest; ``fetch`` gets the earlier payloads a
later-stage basis names that this peer lacks, from its store or from other peers
(``_fetch_bytes``: the senders that named it first), each checked against a validly signed
commitment of this run before it is read (``core.views`` says when and why).

Waiting: the reveal phase (and a transport's commit phase) waits the full deadline only for
members (as the transport knows them) that have committed since their (re)start (``started``: a
peer restarted, or still loading, is a member before it can commit) and are not marked late (a
missed full wait marks a member until its next probe round, one in ``LATE_WINDOW`` + 1, the same
at every peer: ``waited_for_again``); others (fresh ids, members not started yet, recent
stallers) get ``FRESH_SHARE`` of the timeout (``short_wait``), each its own (``patience``). Once a member stays silent through its short wait it gets none again that
round, even while another member is still owed one, and ids that are not
members share one such budget a round: a stream of new ids that commit and never reveal costs at
most one short wait a round, a member that stalls one full wait per ``LATE_WINDOW`` + 1 rounds
(in the same rounds at every honest peer) and a short wait a round in between (only a missed full wait marks a peer late: ``_missed``),
and a member that was late once is still waited for its own short wait beside them (one budget
for all let a silent member starve it). A transport's start gate (``ready``) runs before the
deadline starts.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from abc import abstractmethod
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from genrl_swarm.comm.codec import DEFAULT_MAX_BYTES, Codec, Commitment, ModelRecord, PayloadError, encode_signed, open_commitment
from genrl_swarm.comm.commitments import KEEP_ROUNDS, CommitmentBook, Proof
from genrl_swarm.comm.epoch import Epoch, save_epoch, saved_epoch
from genrl_swarm.comm.held import HeldPayloads
from genrl_swarm.comm.signed_log import SignedLog
from genrl_swarm.core.bodies import MAX_FAULTS, Body, Envelope, FaultRecord
from genrl_swarm.core.identity import Identity, public_key_of, verify_key
from genrl_swarm.core.interfaces import MAX_MODEL_BYTES, Communication, ExchangeResult, Fault, Fetched, FetchedPayload, ModelClaim
from genrl_swarm.core.trust import waited_for_again
from genrl_swarm.core.types import Ref
from genrl_swarm.protocol.exchange import Deadlines

log = logging.getLogger(__name__)
Phase = Literal["commit", "reveal"]
__all__ = ["FRESH_SHARE", "KEEP_ROUNDS", "SIGNED_LOG", "ByteBackend", "HeldAsk", "Phase", "RawExchange"]


#: Share of an exchange's timeout a committer that is not an established, punctual member is
#: waited for in the reveal phase (what a fresh id that never reveals can cost a stage).
FRESH_SHARE = 0.1
#: Where a peer directory keeps what this identity signed last, per epoch (``comm.signed_log``).
SIGNED_LOG = "last_signed"


@dataclass(frozen=True)
class RawExchange:
    """What a transport collected, in arrival order: sender id -> bytes. The sender id is the
    one the transport saw (authenticated on HiveMind streams; only claimed on a board).
    ``missing``: members the transport waited for that sent nothing."""

    payloads: dict[str, bytes]
    expected: int | None = None
    missing: frozenset[str] = frozenset()


@dataclass
class _Opened:
    """What one exchange's payloads held, sender by sender, as they were opened."""

    received: dict[str, tuple[Body, ...]] = field(default_factory=dict)
    bases: dict[str, tuple[Ref, ...]] = field(default_factory=dict)
    late: set[str] = field(default_factory=set)
    faults: list[Fault] = field(default_factory=list)
    costs: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class HeldAsk:
    """One payload to fetch by its digest: the size its signed commitment names (the most bytes
    read from anyone) and whom to ask before the other members: the senders that named it (they
    built on it, so they hold it), then the one that produced it."""

    size: int
    first: tuple[str, ...]


class ByteBackend(Communication):
    """What the launcher asks of a transport, each with a default: ``in_process``,
    ``peers_in_process()`` and ``spawn()`` (the peers this process hosts), ``rank``, ``announce()``
    and ``resume_at()``. A new transport overrides only what it has; the launcher never probes for
    attributes."""

    #: True for backends whose whole swarm lives in this process (in-memory, null): under
    #: torchrun the launcher swaps them for the torch backend, one peer per rank.
    in_process: ClassVar[bool] = False
    #: This peer's number for ``${peer.rank}``/``${peer.seed}``: a torchrun rank, a number drawn
    #: from a DHT peer's id. None: the launcher numbers the peers it hosts (``swarm.rank + i``).
    rank: int | None = None

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, identity: Identity | None = None, swarm: str = "genrl-swarm") -> None:
        self.codec = Codec(max_bytes)
        self.identity = identity or Identity.generate()
        self.swarm_id = swarm
        self._settled = False
        self.account = ""  # this peer's chain account, signed into its commitments
        #: Public keys of peers whose ids do not embed one (named peers on a board or torch
        #: ranks), as the membership layer announced them.
        self.keys: dict[str, bytes] = {}
        self.dropped_total = 0  # bad payloads over this backend's life
        #: Senders this peer quarantines this exchange: transports do not wait for them.
        self.quarantined: frozenset[str] = frozenset()
        #: Committed payload sizes of this exchange's committers (set before the reveal phase): a
        #: transport may pick how to fetch by size. Never a limit: a payload of another size is
        #: still fetched, and then dropped as not matching its commitment (provable).
        self.committed_sizes: dict[str, int] = {}
        #: Every commitment of this run seen, and the proofs of equivocation they make.
        self.ledger = CommitmentBook(swarm, Epoch.new())
        #: The payloads this peer revealed or received, by digest: what others fetch (``comm.held``).
        self.held = HeldPayloads()
        self._late: dict[str, int] = {}  # sender -> last round it was late in (no commitment, or no reveal)
        self.run_dir: Path | None = None  # this peer's run directory (``bind_run``)
        self.signed_log: SignedLog | None = None  # the last (round, stage) this identity signed, per epoch
        self._signed_before: tuple[int, int] | None = None  # ... in this peer's epoch, as read when it settled
        self.fresh_wait = 0.0  # seconds FRESH_SHARE of the current exchange's timeout is
        #: member -> the round it stayed silent through its short wait: it gets none again that round.
        #: Per member, so a member that stays silent never spends the short wait of one that was late
        #: once; ids that are not members (a stream of fresh ones) share one budget a round.
        self._silent: dict[str, int] = {}
        self._strangers_silent = -1
        #: The model this peer's next commitments name and its bytes (``commit_model``).
        self._model: tuple[ModelRecord, bytes] | None = None
        #: accused -> (round, the failed spot check this peer passes on), newest last (``accuse``).
        self._faults: dict[str, tuple[int, FaultRecord]] = {}

    @classmethod
    def peers_in_process(cls, num_peers: int) -> int:
        """How many peers this process hosts: ``swarm.num_peers`` for a backend whose swarm lives
        in one process (in-memory), else one (a torchrun rank, a DHT peer, none), so that
        ``communication=torch`` alone turns any recipe into one peer per rank."""
        return num_peers if cls.in_process else 1

    @classmethod
    def spawn(cls, num_peers: int, **kwargs: Any) -> list[ByteBackend]:
        """Create the peers this process hosts. One, unless the backend is in-process."""
        if num_peers != 1:
            raise ValueError(f"{cls.__name__} hosts one peer per process (swarm.num_peers={num_peers})")
        return [cls(**kwargs)]

    @abstractmethod
    def _exchange_bytes(
        self, round: int, stage: int, phase: Phase, data: bytes, timeout: float, wait_for: Collection[str] | None = None
    ) -> RawExchange:
        """Publish ``data`` for (round, stage, phase) and collect the other peers' bytes within
        ``timeout``. ``wait_for``: the peers worth waiting for (None: every member)."""

    def claim_account(self, account: str) -> None:
        self.account = account

    def announce(self) -> str | None:
        """The arguments another peer starts with to join this one (printed once this peer is
        up), or None where joining needs nothing from this peer."""
        return None

    def resume_at(self, round: int) -> None:
        """This peer resumes from a checkpoint at ``round``: a transport that bounds catch-up
        jumps counts them from here, not from round 0."""

    @property
    def epoch(self) -> Epoch:
        """The run this peer signs in (``comm.epoch``): its own until ``agree_epoch`` settles it
        at the first exchange; a transport that knows it earlier sets it."""
        return self.ledger.epoch

    @epoch.setter
    def epoch(self, epoch: Epoch) -> None:
        if epoch != self.ledger.epoch:  # nothing of another run is worth keeping
            self.ledger = CommitmentBook(self.swarm_id, epoch)

    @property
    def proofs(self) -> dict[str, Proof]:
        """Sender -> the proof of its equivocation this peer holds (and passes on)."""
        return self.ledger.proofs

    def bind_run(self, directory: Path, resume: bool) -> None:
        """This peer's run directory keeps its epoch and the last (round, stage) it signed per
        epoch (``comm.signed_log``; it outlives ``--resume`` and ``--overwrite``). A peer killed
        mid-round and started again in the same epoch would otherwise sign a second, different
        commitment for the same (round, stage), to everyone else a proof of equivocation: it sits
        out every exchange up to the one it signed last (others see it late, which costs nothing).
        On ``resume`` the epoch kept there is offered to the transport (``resumed_epoch``)."""
        self.run_dir, self.signed_log = directory, SignedLog(directory / SIGNED_LOG)
        saved = saved_epoch(directory) if resume else None
        if saved is not None:
            self.resumed_epoch(saved)

    def resumed_epoch(self, saved: Epoch) -> None:
        """``--resume`` found ``saved`` in this peer's run directory. By default the peer plays
        that run again; a transport whose epoch the swarm decides overrides this."""
        self.epoch = saved

    def agree_epoch(self) -> Epoch:
        """The epoch this peer signs in from its first exchange on (called once, just before
        it). By default its own; transports whose peers agree on one override this."""
        return self.epoch

    def _settle(self) -> None:
        """Before this peer's first signature: fix the epoch, keep it in the run directory, and
        read what this identity last signed in it."""
        if self._settled:
            return
        self.epoch, self._settled = self.agree_epoch(), True
        if self.run_dir is not None:
            save_epoch(self.run_dir, self.epoch)
        self._signed_before = self.signed_log.last(self.epoch) if self.signed_log is not None else None
        log.info("%s signs in epoch %s of swarm %r", self.peer_id, self.epoch, self.swarm_id)

    def settled_epoch(self) -> bytes:
        """The epoch, settled now (``_settle``): the game asks before its first act, whose
        sampling is seeded with it (``core.ActSeed``), so it must not change at the exchange."""
        self._settle()
        return self.epoch.value

    def ready(self) -> None:
        """Called before an exchange's deadline starts: a transport's start gate (wait for
        ``min_peers`` before the first round) belongs here, so it never eats an exchange's time."""

    def vouches_for(self, peer: str) -> bool:
        """Whether ``peer`` joined through this process or job (a board member, a torch rank):
        a swarm strangers cannot join, so it is never a newcomer (``core.newcomers``). Open
        transports (HiveMind: anyone may announce a membership) vouch for nobody."""
        return False

    def is_member(self, peer: str) -> bool:
        """Whether ``peer`` holds an established membership on this transport (worth the full
        wait). Transports that only pull from members they know say True."""
        return True

    def started(self, peer: str) -> bool:
        """Whether member ``peer`` has committed since its (re)start, as far as this transport
        can tell: only then is it worth the full wait (``punctual``) and counted toward a start
        gate. A member that restarts (kill -9 and rejoin) or is still loading its model is a
        member before it can commit: waited for in full, it stalled every survivor up to its
        whole start-up (8.9 s a round on a saturated machine; a loading peer the full 180 s).
        Transports whose members cannot restart alone (one process, one torchrun job, whose
        peers are all built before any plays) say True."""
        return True

    def punctual(self, peer: str, round: int) -> bool:
        """A member that has started (``started``) and is not marked late, or is past its mark
        (``waited_for_again``): worth the full wait. The one rule for who gets the full wait."""
        late = self._late.get(peer)
        return self.is_member(peer) and self.started(peer) and (late is None or round >= waited_for_again(late))

    def short_wait(self, peers: Collection[str], round: int, left: float) -> float:
        """How long to wait for ``peers`` (not punctual): ``fresh_wait``, unless every member among
        them already stayed silent through it this round and so did the ids that are not members
        (then 0: a transport still asks once)."""
        members = [p for p in peers if self.is_member(p)]
        owed = any(self._silent.get(p) != round for p in members) or (len(members) < len(peers) and self._strangers_silent != round)
        return min(self.fresh_wait, left) if owed else 0.0

    def patience(self, peer: str, round: int, timeout: float) -> float:
        """How long one phase waits for ``peer``: all of ``timeout`` for a punctual member, else its
        own short wait (0 once it stayed silent through it this round: it is asked once). Per peer,
        so a silent member is never waited for again in the short wait of another that is unsure."""
        return timeout if self.punctual(peer, round) else self.short_wait((peer,), round, timeout)

    def _missed(self, peers: Collection[str], round: int) -> None:
        """``peers`` sent nothing in time. Only a miss of the full wait makes a peer late: one that
        missed its short wait keeps the mark it has, so at its next probe round it is waited
        for in full once more (an honest peer a little behind the others comes back then; before,
        each short miss renewed the mark and it never did)."""
        for peer in peers:
            if self.punctual(peer, round):
                self._late[peer] = round

    def stayed_silent(self, peers: Collection[str], round: int) -> None:
        """``peers`` did not answer within their short wait: none for them again this round."""
        for peer in peers:
            if self.is_member(peer):
                self._silent[peer] = round
            else:
                self._strangers_silent = round

    def verify(self, sender: str, message: bytes, signature: bytes) -> bool:
        return verify_key(self.keys.get(sender) or public_key_of(sender), message, signature)

    def exchange(
        self,
        round: int,
        stage: int,
        bodies: Sequence[Body],
        timeout: float,
        body_type: type[Body] = Body,
        ignore: Collection[str] = frozenset(),
        basis: Sequence[Ref] = (),
    ) -> ExchangeResult:
        self.ready()
        self._settle()
        if self._signed_before is not None and (round, stage) <= self._signed_before:
            log.warning("%s signed r%d/s%d before it was restarted: sits this exchange out", self.peer_id, round, stage)
            return ExchangeResult({self.peer_id: tuple(bodies)}, bases={self.peer_id: tuple(sorted(basis))})
        deadlines = Deadlines.of(time.monotonic(), timeout)  # the protocol core's phase deadlines
        self.quarantined, self.fresh_wait = frozenset(ignore), FRESH_SHARE * timeout
        self._forget(round)
        passed = [fault for _, fault in list(self._faults.values())[-MAX_FAULTS:]]
        payload = self.codec.encode(self.peer_id, round, stage, bodies, self.ledger.signed(round, basis), self.ledger.evidence(), passed)
        model = self._model[0] if self._model is not None else None
        digest = hashlib.sha256(payload).digest()
        mine = Commitment(self.swarm_id, self.epoch.value, round, stage, self.peer_id, digest, len(payload), self.account, model)
        dropped: dict[str, str] = {}
        proven = set(self.proofs)
        commits = self._commitments(mine, deadlines.commit, dropped)
        if self._model is not None:  # the committed model's bytes: what a spot check fetches, served from the commitment on
            self.held.put(round, self._model[1])
        self.committed_sizes = {s: c.size for s, c in commits.items()}
        reveal = self._reveal(round, stage, payload, commits, deadlines.reveal)
        self.held.put(round, payload)  # revealed now: served by its digest from here on, never before
        opened = _Opened(late={p for p, why in dropped.items() if why == NO_COMMITMENT})
        for sender in commits:  # commitment order: who produced identical content first
            if sender == self.peer_id:
                opened.received[sender], opened.bases[sender] = tuple(bodies), tuple(sorted(basis))
            else:
                self._open_one(round, sender, commits[sender], reveal, body_type, opened, dropped)
        equivocators = {p: proof.describe() for p, proof in self.proofs.items() if p not in proven}
        for sender in equivocators:
            opened.received.pop(sender, None)
        for sender, why in dropped.items():
            log.warning("%s dropped payload from %s (r%d/s%d): %s", self.peer_id, sender, round, stage, why)
        self.dropped_total += len(dropped)
        return self._result(opened, commits, dropped, reveal.expected, equivocators)

    def _open_one(
        self, round: int, sender: str, commitment: Commitment, reveal: RawExchange, body_type: type[Body], opened: _Opened, dropped: dict[str, str]
    ) -> None:
        """``sender``'s revealed payload checked against its commitment and decoded into ``opened``,
        or its drop; the thread's CPU it took, charged to it (``ExchangeResult.costs``)."""
        start = time.thread_time()
        try:
            envelope = self._open(reveal.payloads.get(sender), commitment, body_type)
            opened.bases[sender] = self.ledger.references(envelope, self.verify)
            opened.faults += [_fault(sender, record, body) for record, body in self.ledger.faults(envelope, self.verify)]
            opened.received[sender] = tuple(envelope.bodies)
            self.held.put(round, reveal.payloads[sender])
        except PayloadError as e:
            dropped[sender] = str(e)
            if sender not in reveal.payloads:
                opened.late.add(sender)
                self._missed([sender], round)
        finally:
            opened.costs[sender] = time.thread_time() - start

    def _result(
        self, opened: _Opened, commits: Mapping[str, Commitment], dropped: dict[str, str], expected: int | None, equivocators: dict[str, str]
    ) -> ExchangeResult:
        """The exchange as the loop sees it: what was received, and about each sender only what
        its kept payload's commitment says."""
        received = opened.received
        return ExchangeResult(
            received,
            dropped,
            expected,
            sizes={s: c.size for s, c in commits.items()},
            accounts={s: c.account for s, c in commits.items() if c.account},
            late=frozenset(opened.late),
            digests={s: c.digest.hex() for s, c in commits.items() if s in received},
            bases={s: b for s, b in opened.bases.items() if s in received},
            equivocators=equivocators,
            costs={s: c for s, c in opened.costs.items() if s in received},
            vouched=frozenset(s for s in received if self.vouches_for(s)),
            models={s: _claim(c.model) for s, c in commits.items() if c.model is not None and s in received},
            faults=tuple(f for f in opened.faults if f.accuser in received),
        )

    def commit_model(self, model: tuple[str, bytes] | None) -> None:
        if model is None:
            self._model = None
            return
        name, blob = model
        if len(blob) > MAX_MODEL_BYTES:  # the policy offers nothing bigger; a caller that does commits no model
            log.warning("%s commits no model: %d bytes, over the %d a checker fetches", self.peer_id, len(blob), MAX_MODEL_BYTES)
            self._model = None
            return
        self._model = (ModelRecord(name, hashlib.sha256(blob).digest(), len(blob)), blob)

    def fetch_model(self, round: int, sender: str, claim: ModelClaim, timeout: float) -> bytes | None:
        """``Communication.fetch_model``: this peer's store, else the sender, then any member."""
        digest = bytes.fromhex(claim.blob)
        if claim.size > MAX_MODEL_BYTES:
            return None
        blob = self.held.get(digest)
        if blob is None:
            blob = self._fetch_bytes(round, {digest: HeldAsk(claim.size, (sender,))}, timeout).get(digest)
        return blob if blob is not None and len(blob) == claim.size else None

    def accuse(self, round: int, stage: int, sender: str, body: int, blob: bytes) -> None:
        held = self.ledger.slots.get((round, stage, sender))
        if held is None:  # out of the window: nothing signed to pass on
            return
        self._faults.pop(sender, None)
        self._faults[sender] = (round, FaultRecord(held[1], body))
        self.held.put(round, blob)  # a re-checker fetches the accused's model from here too

    def faulted_work(self, fault: Fault, body_type: type[Body], timeout: float) -> tuple[Body, bytes] | str:
        """``Communication.fetch``'s checks for a payload a fault names (its digest, size, the
        codec's bounds, sender, round and stage, against the accused's signed commitment), and
        the model's bytes by their committed sha256; the accuser is asked first, then the accused."""
        record = Commitment(self.swarm_id, fault.epoch, fault.round, fault.stage, fault.accused, bytes.fromhex(fault.payload), fault.size)
        model = bytes.fromhex(fault.claim.blob)
        if fault.size > self.codec.max_bytes or fault.claim.size > MAX_MODEL_BYTES:
            return "its payload or model is over the size limits"
        local = {record.digest: self.held.get(record.digest), model: self.held.get(model)}
        sizes = {record.digest: fault.size, model: fault.claim.size}
        asks = {d: HeldAsk(sizes[d], (fault.accuser, fault.accused)) for d, blob in local.items() if blob is None}
        got = self._fetch_bytes(fault.round, asks, timeout) if asks else {}
        payload, blob = (local[d] if local[d] is not None else got.get(d) for d in (record.digest, model))
        if payload is None or blob is None or len(blob) != fault.claim.size:
            return f"{'its payload' if payload is None else 'its model'} could not be had within {timeout:.1f}s"
        try:
            envelope = self._open(payload, record, body_type)
        except PayloadError as e:
            return str(e)
        if fault.body >= len(envelope.bodies):
            return f"names body {fault.body} of a payload of {len(envelope.bodies)}"
        self.held.put(fault.round, payload)
        self.held.put(fault.round, blob)
        return envelope.bodies[fault.body], blob

    def fetch(self, round: int, wanted: Mapping[Ref, str], body_type: type[Body], timeout: float) -> Fetched:
        """Each payload ``wanted`` names, once a validly signed commitment of this run names its
        digest (held, or a basis record of this exchange checked now: ``CommitmentBook.signed_for``):
        from this peer's store, else from other peers (``_fetch_bytes``), then opened like a
        revealed payload (size, digest, the codec's bounds, sender, round and stage) and its own
        basis read. Each naming sender pays for what its refs cost (``Fetched.costs``); a payload
        had is held from then on, so this peer serves it too. A proof of equivocation found in
        what it read is reported at once (``Fetched.equivocators``), as an exchange reports one."""
        deadline, proven = time.monotonic() + timeout, set(self.proofs)
        costs: defaultdict[str, float] = defaultdict(float)
        failed: dict[Ref, str] = {}
        records: dict[Ref, Commitment] = {}
        for ref, namer in wanted.items():
            start = time.thread_time()
            record = self.ledger.signed_for(round, ref, self.verify)
            costs[namer] += time.thread_time() - start
            if record is None or record.size > self.codec.max_bytes:
                failed[ref] = "no validly signed commitment of this run names it" if record is None else "its commitment is over the size limit"
            else:
                records[ref] = record
        local = {ref: self.held.get(record.digest) for ref, record in records.items()}
        asks = {r.digest: HeldAsk(r.size, tuple(dict.fromkeys((wanted[ref], ref.sender)))) for ref, r in records.items() if local[ref] is None}
        got = self._fetch_bytes(round, asks, _left(deadline)) if asks else {}
        payloads: dict[Ref, FetchedPayload] = {}
        for ref, record in records.items():
            blob = local[ref] if local[ref] is not None else got.get(record.digest)
            if blob is None:
                failed[ref] = f"no peer asked held it within {timeout:.1f}s"
                continue
            start = time.thread_time()
            try:
                envelope = self._open(blob, record, body_type)
                payloads[ref] = FetchedPayload(tuple(envelope.bodies), self.ledger.references(envelope, self.verify))
                self.held.put(round, blob)
            except PayloadError as e:
                failed[ref] = str(e)
            finally:
                costs[wanted[ref]] += time.thread_time() - start
        equivocators = {p: proof.describe() for p, proof in self.proofs.items() if p not in proven}  # in what a fetch read
        return Fetched(payloads, failed, dict(costs), equivocators)

    def _fetch_bytes(self, round: int, asks: Mapping[bytes, HeldAsk], timeout: float) -> dict[bytes, bytes]:
        """Payloads by digest from other peers, within ``timeout``: for each, bytes of exactly
        its size whose sha256 is its digest. A transport where every peer receives every payload
        (one all-gather) asks nobody."""
        return {}

    def _reveal(self, round: int, stage: int, payload: bytes, commits: Mapping[str, Commitment], deadline: float) -> RawExchange:
        """Reveal; collect the committers' payloads: all of them for at most ``fresh_wait``
        seconds, then only the established, punctual members (see the module's docstring)."""
        committed = set(commits) | {self.peer_id}
        unsure = {p for p in committed - {self.peer_id} if not self.punctual(p, round)}
        if not unsure:  # the usual case: one wait
            return self._exchange_bytes(round, stage, "reveal", payload, _left(deadline), committed)
        first = self._exchange_bytes(round, stage, "reveal", payload, self.short_wait(unsure, round, _left(deadline)), committed)
        missing = committed - first.payloads.keys()
        self.stayed_silent(missing & unsure, round)  # once per round, not per stage
        waited = missing - unsure  # punctual as of this exchange's start
        if not waited or _left(deadline) <= 0:
            return first
        rest = self._exchange_bytes(round, stage, "reveal", payload, _left(deadline), waited | {self.peer_id})
        return RawExchange({**first.payloads, **rest.payloads}, first.expected)

    def _forget(self, round: int) -> None:
        self.ledger.forget(round)
        self._faults = {p: f for p, f in self._faults.items() if f[0] >= round - KEEP_ROUNDS}
        for peer in [p for p, r in self._late.items() if round >= waited_for_again(r)]:
            del self._late[peer]
        self._silent = {p: r for p, r in self._silent.items() if r >= round}

    def _commitments(self, mine: Commitment, deadline: float, dropped: dict[str, str]) -> dict[str, Commitment]:
        """Publish ``mine``; every valid commitment for its (round, stage), this peer's own first.
        Quarantined senders are skipped unread; a forged, replayed or oversized one is dropped."""
        round, stage = mine.round, mine.stage
        signed = encode_signed("commit", mine, self.identity.sign)
        if self.signed_log is not None:  # before the commitment leaves this process: a kill after this line is safe
            self.signed_log.record(self.epoch, round, stage)
        self.ledger.remember(mine, signed)
        raw = self._exchange_bytes(round, stage, "commit", signed, _left(deadline))
        dropped.update(dict.fromkeys(raw.missing - self.quarantined, NO_COMMITMENT))
        self._missed(raw.missing - self.quarantined, round)
        commits: dict[str, Commitment] = {self.peer_id: mine}
        for sender, blob in raw.payloads.items():
            if sender in self.quarantined or sender == self.peer_id:
                continue
            try:
                record = open_commitment(blob, functools.partial(self.verify, sender))
                where = (record.swarm, record.round, record.stage, record.sender)
                if where != (self.swarm_id, round, stage, sender):
                    raise PayloadError(f"commitment is for {where}, not ({self.swarm_id!r}, {round}, {stage}, {sender!r})")
                if not self.ledger.names_this_run(record):  # an earlier run of a same-named swarm
                    raise PayloadError(f"commitment is for epoch {record.epoch.hex()[:12]} of {record.swarm!r}, not this run's {self.epoch}")
                if record.size > self.codec.max_bytes:
                    raise PayloadError(f"commits to {record.size} bytes, over the limit of {self.codec.max_bytes}")
            except PayloadError as e:
                dropped[sender] = str(e)
                continue
            self.ledger.remember(record, blob)
            commits[sender] = record
        return commits

    def _open(self, blob: Any, commitment: Commitment, body_type: type[Body]) -> Envelope[Any]:
        if blob is None:
            raise PayloadError("late: committed but revealed nothing before the deadline")
        if not isinstance(blob, bytes) or len(blob) != commitment.size or hashlib.sha256(blob).digest() != commitment.digest:
            raise PayloadError("revealed payload does not match its commitment")
        envelope = self.codec.decode(blob, body_type)
        if (envelope.sender, envelope.round, envelope.stage) != (commitment.sender, commitment.round, commitment.stage):
            raise PayloadError(
                f"envelope says {envelope.sender} r{envelope.round}/s{envelope.stage}, its commitment "
                f"{commitment.sender} r{commitment.round}/s{commitment.stage}"
            )
        return envelope


def _claim(model: ModelRecord) -> ModelClaim:
    return ModelClaim(model.name, model.blob.hex(), model.size)


def _fault(accuser: str, record: Commitment, body: int) -> Fault:
    assert record.model is not None  # CommitmentBook.faults reads only commitments naming a model
    return Fault(accuser, record.sender, record.round, record.stage, body, _claim(record.model), record.epoch, record.digest.hex(), record.size)


NO_COMMITMENT = "late: no commitment before the deadline"  # a sentence for people; the kind is ExchangeResult.late


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)
