"""HiveMind backend: a permissionless swarm with no master, one peer per process.

* **Identity.** The peer's libp2p key is its swarm ``Identity`` (an Ed25519 key file p2pd reads),
  so the stream-authenticated peer id is the id every signature is checked under.
* **Membership** lives on the DHT as small signed records, renewed and expiring after
  ``liveness_timeout`` (``membership.py``). An exchange waits for the members alive now, not
  for a fixed count: a peer that stops renewing stops being waited for.
* **Readiness.** A member's process is waited for in full, and counted toward ``min_peers``,
  only once it has started: its record of this process (``incarnation``) says it reached its
  first exchange (``MemberRecord.ready``), or this peer received a commitment of it. Restarted or
  still loading, it gets the short wait fresh ids get (``ByteBackend.started``).
* **Payloads** never touch the DHT: each peer serves its bytes per (round, stage, phase) from a
  libp2p stream handler and pulls everyone else's concurrently (``streams.py``).
* **Deadlines.** Every DHT and P2P call has one; if the DHT process or p2pd dies, ``exchange``
  raises SwarmFailure within its timeout, and ``close()`` frees the identity lock.
* **Catch-up** (``swarm_round``) follows only a round a quorum of live members' signed records
  attests, and never more than ``max_jump`` rounds past this peer's own.
* **The run** (epoch) is learned at join from the peers this one joins through, or fixed by
  the first peer (``genesis.py``); members of another run are not members of this one.
* **Fetching by digest** (``core.views``): a second stream protocol serves the payloads this peer
  holds (``comm.held``) by their sha256; ``_fetch_bytes`` asks the senders that named a payload
  first, then its producer, then other live members, a few at once, each ask bounded.
* **Whom to pull from** is the protocol core's exchange strategy (``communication.strategy``):
  ``all`` (every live member), ``pull_k`` (k drawn at random) or ``pull_spare`` (k + spares,
  revealing once k + extra committed). The draw is seeded by (swarm, peer, round, stage), so the
  simulator (``genrl-swarm simulate``) picks exactly the peers this transport picks.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from genrl_swarm.comm.base import ByteBackend, HeldAsk, Phase, RawExchange
from genrl_swarm.comm.codec import DEFAULT_MAX_BYTES, MAX_RECORD_BYTES
from genrl_swarm.comm.epoch import Epoch
from genrl_swarm.comm.errors import SwarmFailure
from genrl_swarm.comm.hivemind.boot import NEW_PEER, PeerIdentity, check_multiaddrs, initial_peers_from_env, start_dht
from genrl_swarm.comm.hivemind.genesis import ids_in, swarm_epoch
from genrl_swarm.comm.hivemind.loop import LoopThread
from genrl_swarm.comm.hivemind.members import MAX_LIFETIME, MemberRecord, MemberValidator, MemberView, attested_round
from genrl_swarm.comm.hivemind.membership import Membership
from genrl_swarm.comm.hivemind.peers import AddressBook
from genrl_swarm.comm.hivemind.process import kill_all, p2pd_of, running
from genrl_swarm.comm.hivemind.streams import Puller, SlotStore, request_held, serve, serve_held, serve_unary
from genrl_swarm.comm.signed_log import SignedLog
from genrl_swarm.core.trust import LATE_WINDOW, waited_for_again
from genrl_swarm.protocol import Plan, Strategy, make_strategy

log = logging.getLogger(__name__)
#: How long a peer past its wait is still asked: once, without a long poll (its bytes may be posted).
ASK_ONCE = 0.05
#: A signed commitment is far below this; base.py refuses anything larger anyway.
COMMIT_LIMIT = MAX_RECORD_BYTES + 512
#: A fetch by digest asks at most this many peers for one payload (those that named it and its
#: producer first), at most FETCH_AT_ONCE asks open at a time, each for at most FETCH_ASK seconds:
#: peers that do not hold it answer at once, so an honest holder is reached in a few round trips.
FETCH_PEERS, FETCH_AT_ONCE, FETCH_ASK = 8, 8, 2.0


class HivemindBackend(ByteBackend):
    def __init__(
        self,
        initial_peers: Sequence[str] = (),
        host_maddrs: Sequence[str] = ("/ip4/127.0.0.1/tcp/0",),
        identity_path: str | None = None,
        peers_path: str | None = None,
        swarm: str = "genrl-swarm",
        min_peers: int = 1,
        min_peers_timeout: float = 300.0,
        liveness_timeout: float = 3.0,
        max_jump: int = 50,
        catch_up_quorum: float = 0.5,
        max_concurrency: int = 32,
        startup_timeout: float = 120.0,
        call_timeout: float = 5.0,
        nat_traversal: bool = False,
        max_bytes: int = DEFAULT_MAX_BYTES,
        strategy: str = "all",
        k: int = 8,
        spares: int = 4,
        extra: int = 2,
    ) -> None:
        if not 0 < liveness_timeout <= MAX_LIFETIME or max_jump < 0 or not 0 <= catch_up_quorum < 1 or max_concurrency < 1:
            raise ValueError(
                f"hivemind: need 0 < liveness_timeout <= {MAX_LIFETIME:.0f}, max_jump >= 0, 0 <= catch_up_quorum < 1, max_concurrency >= 1"
            )
        self.strategy = _strategy(strategy, k, spares, extra)
        try:
            import hivemind  # noqa: F401
        except ImportError as e:
            raise SwarmFailure("the hivemind backend needs: pip install 'genrl-swarm[hivemind]'") from e
        configured = list(initial_peers) or initial_peers_from_env()
        check_multiaddrs(configured, host_maddrs)
        self._key = PeerIdentity(identity_path)
        super().__init__(max_bytes, self._key.identity, swarm)
        _raise_fd_limit()
        if any(m.rstrip("/").endswith(f"/p2p/{self.peer_id}") for m in configured):
            self._key.release()
            raise SwarmFailure(
                f"initial peers include this peer's own id {self.peer_id}: identity {self._key.path} is already running "
                f"there; join through another peer, or {NEW_PEER}"
            )
        self.min_peers, self.min_peers_timeout = min_peers, min_peers_timeout
        self.liveness, self.max_jump, self.quorum = liveness_timeout, max_jump, catch_up_quorum
        self.call_timeout = call_timeout
        self.round, self.resumed_round = -1, -1  # latest round exchanged in; round a resume starts at
        self._interrupted, self._gate_open, self._missing = False, False, frozenset[str]()
        self._closed = False
        self._p2pd: int | None = None
        # Set by _start; close() copes with any of them missing (a start that failed half-way).
        self.dht: Any = None
        self.p2p: Any = None
        self._loop: LoopThread
        self.membership: Membership
        book_path = Path(peers_path).expanduser() if peers_path else Path(f"{self._key.path}.peers.json") if identity_path else None
        self.book = AddressBook(book_path, self.peer_id)
        self._sightings: dict[str, float] = {}  # peer -> last traffic from it (written on the event loop)
        self.plans: dict[tuple[int, int], Plan] = {}  # (round, stage) -> the plan used (the last few)
        self._through: frozenset[str] = frozenset()  # the peers this one joins through: whose epoch it plays
        self._committed: dict[str, int] = {}  # member -> the incarnation this peer last received a commitment from
        self._epoch_lock = threading.Lock()  # the membership thread follows the swarm's epoch until the first exchange
        try:
            self._start(configured, list(host_maddrs), startup_timeout, max_concurrency, nat_traversal)
        except BaseException:
            self.close()
            raise
        # A stable per-identity number, so ${peer.rank}/${peer.seed} differ between peers.
        self.rank = int(hashlib.sha256(self.peer_id.encode()).hexdigest()[:6], 16)
        log.info("DHT peer %s listening on %s", self.peer_id, " ".join(self._maddrs))

    def _start(self, configured: list[str], host_maddrs: list[str], timeout: float, concurrency: int, nat: bool) -> None:
        remembered = [m for m in self.book.load() if m not in configured]
        validator = MemberValidator(self.swarm_id)
        try:
            self.dht = start_dht(self._key.path, configured + remembered, host_maddrs, timeout, [validator], nat)
        except SwarmFailure:
            if configured or not remembered:
                raise
            log.warning("%s: none of the %d remembered peers answered; starting a new swarm", self.peer_id, len(remembered))
            self.dht = start_dht(self._key.path, [], host_maddrs, timeout, [validator], nat)
        self._p2pd = p2pd_of(self.dht.pid)
        self._loop = LoopThread(f"p2p-{self.peer_id[-6:]}")
        self._loop.call(self._open_streams(concurrency), timeout)
        if str(self.p2p.peer_id) != self.peer_id:
            raise SwarmFailure(f"p2pd runs as {self.p2p.peer_id}, not as identity {self.peer_id} from {self._key.path}")
        self.membership = Membership(
            self.dht,
            self.identity,
            self.swarm_id,
            self._maddrs,
            self.liveness,
            self.call_timeout,
            self._own_round,
            self.book,
            self._sightings,
            epoch_of=lambda: self.epoch.value,
            on_view=self._follow_swarm,
        )
        self._through = ids_in(configured + remembered) - {self.peer_id}
        self._follow_swarm(MemberView(self.membership.read()).live(self.liveness, {}))  # before announcing any epoch
        self.membership.start()

    async def _open_streams(self, concurrency: int) -> None:
        from hivemind import DHT
        from hivemind.p2p import P2P, PeerID

        maddr = await asyncio.wrap_future(self.dht.run_coroutine(DHT._get_p2p_daemon_listen_maddr, return_future=True))
        self._daemon_socket = Path(str(maddr).removeprefix("/unix"))
        self.p2p = await P2P.replicate(maddr)
        self.store = SlotStore(self._sightings)
        self._proto = f"/genrl-swarm/{self.swarm_id}/slot/2"
        await self.p2p.add_binary_stream_handler(self._proto, lambda *a: serve(self.store, *a))
        await self.p2p._client.add_unary_handler(f"{self._proto}/unary", lambda *a: serve_unary(self.store, *a))
        await self.p2p.add_binary_stream_handler(f"{self._proto}/held", lambda *a: serve_held(self.store, self.held.get, *a))
        self._maddrs = [str(m) for m in await self.p2p.get_visible_maddrs()]
        self._dialed: dict[str, float] = {}
        ids: dict[str, Any] = {}  # peer id text -> hivemind PeerID, parsed once
        self.puller = Puller(self.p2p, self._proto, concurrency, lambda p: ids.get(p) or ids.setdefault(p, PeerID.from_base58(p)), self._sightings)

    @property
    def peer_id(self) -> str:
        return self.identity.peer_id

    def _follow_swarm(self, records: Mapping[str, MemberRecord] | None = None) -> None:
        """Until its first exchange this peer plays the epoch its swarm announces (``genesis``):
        called at start and after every read of the members (``records``: the live ones, all
        epochs; default: the membership's view)."""
        with self._epoch_lock:
            if self._settled:
                return
            seen = self.membership.announced() if records is None else records
            epoch = swarm_epoch({p: r for p, r in seen.items() if p != self.peer_id}, self._through, self.epoch)
            if epoch != self.epoch:
                log.info("%s plays epoch %s of swarm %r, as its members announce", self.peer_id, epoch, self.swarm_id)
                self.epoch = epoch

    def resumed_epoch(self, saved: Epoch) -> None:
        """``--resume`` brings the run directory's epoch: kept where this peer starts the swarm or
        the swarm plays it; a swarm that plays another is a new run (``genesis``)."""
        with self._epoch_lock:
            self.epoch = saved
        self._follow_swarm()

    def agree_epoch(self) -> Epoch:
        """The swarm's epoch as this peer sees it now; from here on it no longer follows."""
        self._follow_swarm()
        with self._epoch_lock:
            self._settled = True
            return self.epoch

    def bind_run(self, directory: Path, resume: bool) -> None:
        """As ``ByteBackend.bind_run``, but an identity file keeps what it signed beside it
        (``<identity>.signed``): on HiveMind the epoch is the swarm's word, not this run
        directory's, so the guard must hold whichever directory (or cleared ``runs/``) the
        identity is used from. A temporary identity never signs in two runs."""
        super().bind_run(directory, resume)
        if self._key.lock is not None:
            self.signed_log = SignedLog(self._key.path.with_name(f"{self._key.path.name}.signed"))

    def visible_maddrs(self) -> list[str]:
        return list(self._maddrs)

    def announce(self) -> str:
        return f"--initial-peers {self._maddrs[0]}"

    def _own_round(self) -> int:
        return self.round

    # -- exchange ---------------------------------------------------------------------------

    def _exchange_bytes(
        self, round: int, stage: int, phase: Phase, data: bytes, timeout: float, wait_for: Collection[str] | None = None
    ) -> RawExchange:
        self._raise_if_failed()
        if phase == "commit":
            self.round = max(self.round, round)
        deadline = time.monotonic() + timeout
        enough: int | None = None
        if wait_for is None:  # the commit phase: the strategy picks whom to ask
            plan = self._plan(round, stage)
            targets = list(plan.candidates)
            enough = plan.needed if plan.needed < len(targets) else None  # None: wait for every candidate
        else:
            targets = sorted(set(wait_for) - {self.peer_id} - self.quarantined)
        # A member late lately (no commitment, or no reveal) costs its own short wait, not the deadline.
        short = {p for p in targets if not self.punctual(p, round)} if enough is None else set()
        limit = COMMIT_LIMIT if phase == "commit" else self.codec.max_bytes
        sizes = {p: self.committed_sizes[p] for p in targets if phase == "reveal" and p in self.committed_sizes}
        left = max(deadline - time.monotonic(), ASK_ONCE)  # past the deadline, still one quick ask: the bytes may be there
        patience = {p: max(self.patience(p, round, left), ASK_ONCE) for p in short}
        try:
            got = self._loop.call(self._pull((round, stage, phase), data, targets, limit, left, enough, sizes, patience), left + 2.0)
        except TimeoutError as e:  # the loop itself did not answer: p2pd or this process is stuck
            self._raise_if_failed()
            raise SwarmFailure(f"peer {self.peer_id}: the p2p event loop did not answer within {left + 2:.0f}s") from e
        self._raise_if_failed()
        if phase == "commit":  # it commits: started, in the process its record names now
            records = self.membership.view.records
            self._committed |= {p: records[p].incarnation for p in got if p in records}
        missing = set(targets) - got.keys()
        self.stayed_silent(missing & short, round)  # once per round, not per stage
        self._log_missing(round, stage, phase, missing if enough is None else set())
        silent = frozenset(missing) if phase == "commit" and enough is None else frozenset()  # late: dropped, never counted
        return RawExchange({self.peer_id: data, **got}, expected=(len(targets) if enough is None else enough) + 1, missing=silent)

    def _fetch_bytes(self, round: int, asks: Mapping[bytes, HeldAsk], timeout: float) -> dict[bytes, bytes]:
        """Payloads by digest from the peers holding them (``ByteBackend.fetch``), within ``timeout``."""
        self._raise_if_failed()
        if timeout <= 0:
            return {}
        try:
            return self._loop.call(self._fetch(asks, timeout), timeout + 2.0)
        except TimeoutError as e:  # the loop itself did not answer: p2pd or this process is stuck
            self._raise_if_failed()
            raise SwarmFailure(f"peer {self.peer_id}: the p2p event loop did not answer within {timeout + 2:.0f}s") from e

    async def _fetch(self, asks: Mapping[bytes, HeldAsk], timeout: float) -> dict[bytes, bytes]:
        loop = asyncio.get_running_loop()
        deadline, at_once, got = loop.time() + timeout, asyncio.Semaphore(FETCH_AT_ONCE), dict[bytes, bytes]()
        members = sorted(set(self.membership.live()) - {self.peer_id} - self.quarantined)

        async def one(digest: bytes, ask: HeldAsk) -> None:
            ask_order = [p for p in dict.fromkeys([*ask.first, *members]) if p != self.peer_id and p not in self.quarantined]
            for peer in ask_order[:FETCH_PEERS]:
                left = deadline - loop.time()
                if left <= 0:
                    return
                try:
                    async with at_once:
                        proto, peer_id = f"{self._proto}/held", self.puller.peer_id_of(peer)
                        blob = await asyncio.wait_for(request_held(self.p2p, peer_id, proto, digest, ask.size), min(left, FETCH_ASK))
                except (*self.puller.errors, asyncio.TimeoutError, ValueError) as e:
                    log.debug("%s: fetching %s from %s: %s", self.peer_id, digest.hex()[:12], peer, e)
                    continue
                if blob is not None and len(blob) == ask.size and hashlib.sha256(blob).digest() == digest:
                    got[digest] = blob
                    return

        await asyncio.gather(*(one(digest, ask) for digest, ask in asks.items()))
        return got

    def _plan(self, round: int, stage: int) -> Plan:
        """The protocol core's choice for this (round, stage), from the live members; peers that
        committed and revealed nothing lately are asked last."""
        self._late = {p: r for p, r in self._late.items() if round < waited_for_again(r)}  # as ByteBackend.punctual
        recent = set(self._late)
        plan = self.strategy.plan(self.swarm_id, self.peer_id, round, stage, sorted(self.membership.live()), self.quarantined, recent)
        self.plans[(round, stage)] = plan
        for old in [key for key in self.plans if key[0] < round - LATE_WINDOW]:
            del self.plans[old]
        return plan

    async def _pull(
        self,
        slot: tuple[int, int, str],
        data: bytes,
        targets: list[str],
        limit: int,
        timeout: float,
        enough: int | None,
        sizes: dict[str, int],
        patience: dict[str, float],
    ) -> dict[str, bytes]:
        self.store.put(slot, data)
        now = asyncio.get_running_loop().time()
        until = {p: now + wait for p, wait in patience.items()}
        return await self.puller.pull(
            targets, slot, now + timeout, limit, self._wanted, self._redial, self._stopped, enough=enough, sizes=sizes, until=until
        )

    def _wanted(self, peer: str) -> bool:
        return peer in self.membership.live()

    def _stopped(self) -> bool:
        return self._interrupted or self._failure() is not None

    async def _redial(self, peer: str) -> None:
        """Connect to ``peer`` at the addresses its record announces (at most once a second):
        p2pd only knows the addresses of peers the DHT has met."""
        from hivemind.utils.multiaddr import Multiaddr

        record = self.membership.view.records.get(peer)
        now = time.monotonic()
        if record is None or now - self._dialed.get(peer, 0.0) < 1.0:
            return
        self._dialed[peer] = now
        try:
            maddrs = [Multiaddr(m) for m in record.maddrs]
            await asyncio.wait_for(self.p2p._client.connect(self.puller.peer_id_of(peer), maddrs), min(self.call_timeout, 2.0))
        except (*self.puller.errors, asyncio.TimeoutError, ValueError) as e:
            log.debug("%s: dialing %s failed: %s", self.peer_id, peer, e)

    def ready(self) -> None:
        """This process reached its first exchange: say so (``MemberRecord.ready``), then the
        ``min_peers`` gate, before the first exchange's deadline starts: a peer started by hand
        seconds after this one is waited for here, not counted late in round 0."""
        self.membership.mark_ready()
        self._open_gate()

    def started(self, peer: str) -> bool:
        """Its newest record, of the process it runs now, says it reached its first exchange, or
        this peer received a commitment from that process (``ByteBackend.started``)."""
        record = self.membership.view.records.get(peer)
        return record is not None and (record.ready or self._committed.get(peer) == record.incarnation)

    def _ready_members(self) -> int:
        return sum(1 for p in self.membership.live() if p == self.peer_id or self.started(p))

    def _open_gate(self) -> None:
        """Before this peer's first exchange only: wait (at most ``min_peers_timeout``) for
        ``min_peers`` live members that have started (``started``: a member still loading its
        model is not counted, or one peer would play its first rounds alone), so a swarm started
        together plays its first round together."""
        deadline = time.monotonic() + self.min_peers_timeout
        if not self._gate_open and self._ready_members() < self.min_peers:
            log.info("%s: waiting up to %.0fs for %d started members before the first round", self.peer_id, self.min_peers_timeout, self.min_peers)
        while not self._gate_open and not self._interrupted and time.monotonic() < deadline:  # bounded by the deadline
            if self._ready_members() >= self.min_peers:
                break
            self._raise_if_failed()
            time.sleep(0.05)
        self._gate_open = True

    def _log_missing(self, round: int, stage: int, phase: Phase, missing: set[str]) -> None:
        """Say who did not answer, once per change of that set (not at every stage)."""
        if phase == "reveal" and not missing:
            return
        now = frozenset(missing)
        if now == self._missing:
            return
        if now:
            log.warning("%s r%d/s%d: no %s from %s before the deadline", self.peer_id, round, stage, phase, ", ".join(sorted(now)))
        else:
            log.info("%s r%d/s%d: every live member answered again", self.peer_id, round, stage)
        self._missing = now

    # -- health and catch-up ----------------------------------------------------------------

    def _failure(self) -> str | None:
        if self.dht is None or self._closed:
            return None
        if not self.dht.is_alive():
            return f"the DHT process of peer {self.peer_id} (pid {self.dht.pid}) died with exit code {self.dht.exitcode}"
        if self._p2pd is not None and not running(self._p2pd):
            return f"the p2pd daemon of peer {self.peer_id} (pid {self._p2pd}) died"
        return None

    def _raise_if_failed(self) -> None:
        failure = self._failure()
        if failure is not None:
            raise SwarmFailure(f"{failure}: this peer cannot reach the swarm any more; restart it (with --resume to continue from its checkpoint)")

    def swarm_round(self) -> int:
        """The round a quorum of live members attests, at most ``max_jump`` past this peer's."""
        own = max(self.round, self.resumed_round, 0)
        others = [r.round for p, r in self.membership.live().items() if p != self.peer_id]
        return attested_round(own, others, self.quorum, self.max_jump)

    def resume_at(self, round: int) -> None:
        """Resuming from a checkpoint: ``round`` is where this peer stands for ``max_jump``."""
        self.resumed_round = max(self.resumed_round, round)

    def interrupt(self) -> None:
        self._interrupted = True

    def close(self) -> None:
        """Leave (announced, when the DHT still works), stop the loop, the DHT process and p2pd,
        and free the identity lock. Bounded: a few seconds even when a part is dead or stuck."""
        if self._closed:
            return
        healthy = self._failure() is None
        membership: Membership | None = getattr(self, "membership", None)
        if membership is not None:
            membership.close(announce=healthy)
        self._closed = True
        loop: LoopThread | None = getattr(self, "_loop", None)
        if loop is not None:
            if self.p2p is not None:
                try:  # closes this process's client of p2pd and removes its socket file
                    loop.call(self.p2p.shutdown(), 2.0)
                except (TimeoutError, OSError) as e:
                    log.debug("%s: p2p client shutdown: %s", self.peer_id, e)
            loop.close()
        if self.dht is not None and self.dht.is_alive():
            if healthy:
                self.dht.shutdown()  # hivemind joins for 3 s, then terminates
            else:
                self.dht.terminate()  # its p2pd is gone: nothing to shut down gracefully
            self.dht.join(3)
        kill_all([self._p2pd])  # p2pd orphaned if the DHT process was killed
        socket_file: Path | None = getattr(self, "_daemon_socket", None)
        if socket_file is not None and socket_file.name.startswith("hivemind-p2pd-"):
            socket_file.unlink(missing_ok=True)  # left behind by a p2pd that was killed
        self._key.release()


def _strategy(name: str, k: int, spares: int, extra: int) -> Strategy:
    """``communication.strategy`` with the parameters it takes (gossip is simulated only)."""
    params = {"all": {}, "pull_k": {"k": k}, "pull_spare": {"k": k, "spares": spares, "extra": extra}}
    if name not in params:
        raise ValueError(f"communication.strategy: {name!r} is not one of {', '.join(params)} (gossip is simulated only: genrl-swarm simulate)")
    return make_strategy(name, **params[name])


def _raise_fd_limit() -> None:
    """Every stream a peer serves holds a file descriptor: lift the soft limit (often 1,024) to
    the hard one, so the stream caps, not the OS, decide how many peers are served."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
