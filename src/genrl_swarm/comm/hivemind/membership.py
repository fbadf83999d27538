"""Keeping this peer's membership record fresh and reading everyone else's.

One thread owns every DHT call after start-up (hivemind's control pipe is not safe to share
between threads), and every call has a deadline. It renews this peer's signed record every
``liveness_timeout / 3`` seconds (sooner when its round or epoch changed), reads the members
every ``liveness_timeout / 4`` seconds, logs who joined and who stopped renewing (once per
change), and remembers the peers' addresses for the next start. Members are the peers whose
records name this peer's epoch (``epoch_of``); records of every epoch are kept, to learn the
swarm's at join (``genesis``).
"""

from __future__ import annotations

import concurrent.futures
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from genrl_swarm.comm.errors import SwarmFailure
from genrl_swarm.comm.hivemind.boot import NEW_PEER
from genrl_swarm.comm.hivemind.members import MemberRecord, MemberView, members_key, merge, open_member, seal
from genrl_swarm.comm.hivemind.peers import AddressBook
from genrl_swarm.core.identity import Identity
from genrl_swarm.protocol.view import forget_after

log = logging.getLogger(__name__)


class Membership:
    def __init__(
        self,
        dht: Any,
        identity: Identity,
        swarm: str,
        maddrs: list[str],
        liveness_timeout: float,
        call_timeout: float,
        round_of: Callable[[], int],
        book: AddressBook,
        sightings: dict[str, float],
        epoch_of: Callable[[], bytes] = lambda: b"",
        on_view: Callable[[], None] = lambda: None,
    ) -> None:
        self.dht, self.identity, self.swarm, self.maddrs = dht, identity, swarm, tuple(maddrs[:8])
        self.liveness, self.call_timeout, self.round_of, self.book = liveness_timeout, call_timeout, round_of, book
        self.sightings, self.epoch_of, self.on_view = sightings, epoch_of, on_view
        self.key, self.peer_id = members_key(swarm), identity.peer_id
        self.incarnation = secrets.randbits(62)
        self.ready = False  # announced in every record from ``mark_ready`` on (``MemberRecord.ready``)
        self.view = MemberView({})  # replaced whole, never mutated: safe to read from any thread
        self.renew_every, self.read_every = liveness_timeout / 3, liveness_timeout / 4
        self._published: tuple[int, float] | None = None  # (round, issued) of the last record stored
        self._published_epoch, self._published_ready = b"", False
        self._alive_logged: frozenset[str] = frozenset()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"members-{self.peer_id[-6:]}", daemon=True)

    def start(self) -> None:
        """Check that no other process renews this identity, announce it, read the members."""
        self._check_identity_free()
        self.publish()
        self.refresh()
        self._thread.start()

    def live(self) -> dict[str, MemberRecord]:
        """Members of this peer's epoch heard of within the liveness timeout (this peer included)."""
        epoch = self.epoch_of()
        return {p: r for p, r in self.announced().items() if r.epoch == epoch}

    def announced(self) -> dict[str, MemberRecord]:
        """Every live peer's newest record, whatever epoch it names (``genesis`` reads them)."""
        return self.view.live(self.liveness, self.sightings)

    def _call(self, submit: Callable[[], Any]) -> Any:
        if not self.dht.is_alive():
            raise SwarmFailure("the DHT process is not running")
        future = submit()
        try:
            return future.result(self.call_timeout)
        except concurrent.futures.TimeoutError as e:
            future.cancel()
            raise TimeoutError(f"the DHT did not answer within {self.call_timeout:.1f}s") from e

    def publish(self, leaving: bool = False) -> None:
        now = time.time()
        expires = now + self.liveness
        epoch = self.epoch_of()
        record = MemberRecord(self.swarm, self.peer_id, self.round_of(), now, expires, self.maddrs, self.incarnation, leaving, epoch, self.ready)
        ok = self._call(lambda: self.dht.store(self.key, seal(record, self.identity), expires, subkey=self.peer_id, return_future=True))
        if not ok:
            log.debug("%s: the DHT did not take this peer's membership record", self.peer_id)
        self._published, self._published_epoch, self._published_ready = (record.round, now), epoch, record.ready

    def mark_ready(self) -> None:
        """This process reached its first exchange (everything loaded): the background loop says
        so at its next pass (``read_every``), not at the next renewal, so peers waiting at their
        ``min_peers`` gate count it within a second. Never a DHT call on the caller's thread: the
        exchange that calls this must not wait on the DHT (a dead one is its own failure)."""
        self.ready = True

    def read(self) -> dict[str, MemberRecord]:
        found = self._call(lambda: self.dht.get(self.key, latest=True, return_future=True))
        if found is None or not isinstance(found.value, dict):
            return {}
        records = {}
        for subkey, item in found.value.items():
            record = open_member(getattr(item, "value", None), subkey, self.swarm)
            if record is not None:
                records[record.peer] = record
        return records

    def refresh(self) -> None:
        now, forget = time.time(), forget_after(self.liveness)
        merged = merge(self.view.records, self.read())
        self.view = MemberView({p: r for p, r in merged.items() if now - r.issued < forget})
        for peer, seen in list(self.sightings.items()):
            if now - seen > forget:
                self.sightings.pop(peer, None)
        alive = frozenset(self.live())
        if alive != self._alive_logged:
            for peer in sorted(alive - self._alive_logged - {self.peer_id}):
                log.info("%s: peer %s joined (round %d)", self.peer_id, peer, self.view.records[peer].round)
            for peer in sorted(self._alive_logged - alive):
                # No record left means it was forgotten (the DHT was unreachable for a long time).
                record = self.view.records.get(peer)
                heard = max(record.issued if record else 0.0, self.sightings.get(peer, 0.0))
                quiet = "stopped renewing its membership" + (f" (last heard of {now - heard:.1f}s ago)" if heard else "")
                why = "left" if record is not None and record.leaving else quiet
                log.warning("%s: peer %s %s; no longer waited for", self.peer_id, peer, why)
            self._alive_logged = alive
        self.book.update({p: r.maddrs for p, r in self.view.records.items() if p in alive})
        self.on_view()  # the backend follows its swarm's epoch until its first exchange

    def tick(self) -> None:
        """One pass of the background loop: renew when due or when the round, epoch or readiness
        changed, then read."""
        last = self._published
        due = last is None or time.time() - last[1] >= self.renew_every or self.round_of() != last[0]
        if due or self.epoch_of() != self._published_epoch or self.ready != self._published_ready:
            self.publish()
        self.refresh()

    def _run(self) -> None:
        while not self._stop.wait(self.read_every):  # bounded: ends with close() or the DHT process
            if not self.dht.is_alive():
                return
            try:
                self.tick()
            except Exception as e:  # noqa: BLE001 - anything the DHT process sends back; the next pass retries
                log.debug("%s: membership update failed: %s: %s", self.peer_id, type(e).__name__, e)

    def _check_identity_free(self) -> None:
        """A live record for this peer id from another process means a twin is running
        somewhere: wait (at most one liveness timeout) to see whether it is renewed."""
        first = self.read().get(self.peer_id)
        if first is None or first.leaving or time.time() - first.issued > self.liveness:
            return
        age = time.time() - first.issued
        log.info("%s: a membership record of this identity is %.1fs old; waiting until it expires or is renewed", self.peer_id, age)
        while time.time() <= first.issued + self.liveness + self.read_every:  # bounded by the record's lifetime
            time.sleep(self.read_every)
            latest = self.read().get(self.peer_id)
            if latest is not None and latest.issued > first.issued and not latest.leaving:
                raise SwarmFailure(
                    f"identity {self.peer_id} is already used by a running peer (it renewed its membership from "
                    f"{', '.join(latest.maddrs) or 'an unknown address'}): stop that peer, or {NEW_PEER}"
                )

    def close(self, announce: bool = True) -> None:
        """Stop renewing and, if ``announce`` (the DHT and p2pd still run), publish that this
        peer left, so the others stop waiting for it at once."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.call_timeout + 1)
        if announce and self._published is not None and self.dht.is_alive():
            try:
                self.publish(leaving=True)
            except Exception as e:  # noqa: BLE001 - leaving is best effort: the record expires anyway
                log.debug("%s: could not announce leaving: %s", self.peer_id, e)
