"""ByteBackend: the shared half of every backend.

A backend only moves opaque bytes (``_exchange_bytes``); signatures, commitments, encoding,
validation and dropping bad payloads happen here once, so all backends treat peers the same.

One exchange is two phases through the transport:

1. **commit**: each peer publishes a signed ``Commitment`` (sha256 and size of its payload,
   bound to swarm, round and stage). Signatures are checked before anything is parsed.
2. **reveal**: each peer publishes its payload. A payload counts only if its sender committed
   to exactly these bytes in phase 1, so nobody can re-send a payload it saw revealed as its
   own, and the order of commitments says who produced identical content first.
"""

from __future__ import annotations

import hashlib
import logging
import time
from abc import abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from genrl_swarm.comm.codec import DEFAULT_MAX_BYTES, Codec, Commitment, PayloadError, encode_signed, open_commitment
from genrl_swarm.core.bodies import Body
from genrl_swarm.core.identity import Identity, public_key_of, verify_key
from genrl_swarm.core.interfaces import LATE, Communication, ExchangeResult

log = logging.getLogger(__name__)
Phase = Literal["commit", "reveal"]


#: Share of an exchange's timeout kept for the reveal phase: a member that never commits must
#: not eat the whole deadline and make honest peers' reveals look late.
REVEAL_SHARE = 0.25


@dataclass(frozen=True)
class RawExchange:
    """What a transport collected, in arrival order: sender id -> bytes. The sender id is the
    one the transport saw (authenticated on HiveMind streams; only claimed on a board).
    ``missing``: members the transport waited for that sent nothing."""

    payloads: dict[str, bytes]
    expected: int | None = None
    missing: frozenset[str] = frozenset()


class ByteBackend(Communication):
    """What the launcher asks of a transport, each with a default: ``in_process`` and ``spawn``
    (how many peers this process hosts), ``rank``, ``announce()`` and ``resume_at()``. A new
    transport overrides only what it has; the launcher never probes for attributes."""

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
        self.account = ""  # this peer's chain account, signed into its commitments
        #: Public keys of peers whose ids do not embed one (named peers on a board or torch
        #: ranks), as the membership layer announced them.
        self.keys: dict[str, bytes] = {}
        self.dropped_total = 0  # bad payloads over this backend's life
        #: Senders this peer quarantines this exchange: transports do not wait for them.
        self.quarantined: frozenset[str] = frozenset()

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
    ) -> ExchangeResult:
        deadline = time.monotonic() + timeout
        self.quarantined = frozenset(ignore)
        payload = self.codec.encode(self.peer_id, round, stage, bodies)
        mine = Commitment(self.swarm_id, round, stage, self.peer_id, hashlib.sha256(payload).digest(), len(payload), self.account)
        dropped: dict[str, str] = {}
        commits = self._commitments(mine, deadline - REVEAL_SHARE * timeout, dropped)
        reveal = self._exchange_bytes(round, stage, "reveal", payload, _left(deadline), frozenset(commits) | {self.peer_id})
        received: dict[str, tuple[Body, ...]] = {}
        for sender in commits:  # commitment order: who produced identical content first
            if sender == self.peer_id:
                received[sender] = tuple(bodies)
                continue
            try:
                received[sender] = self._open(reveal.payloads.get(sender), commits[sender], body_type)
            except PayloadError as e:
                dropped[sender] = str(e)
        for sender, why in dropped.items():
            log.warning("%s dropped payload from %s (r%d/s%d): %s", self.peer_id, sender, round, stage, why)
        self.dropped_total += len(dropped)
        return ExchangeResult(
            received,
            dropped,
            reveal.expected,
            sizes={s: c.size for s, c in commits.items()},
            accounts={s: c.account for s, c in commits.items() if c.account},
        )

    def _commitments(self, mine: Commitment, deadline: float, dropped: dict[str, str]) -> dict[str, Commitment]:
        """Publish ``mine``; every valid commitment for its (round, stage), this peer's own first.
        Quarantined senders are skipped unread; a forged, replayed or oversized one is dropped."""
        round, stage = mine.round, mine.stage
        raw = self._exchange_bytes(round, stage, "commit", encode_signed("commit", mine, self.identity.sign), _left(deadline))
        dropped.update({peer: f"{LATE} no commitment before the deadline" for peer in raw.missing - self.quarantined})
        commits: dict[str, Commitment] = {self.peer_id: mine}
        for sender, blob in raw.payloads.items():
            if sender in self.quarantined or sender == self.peer_id:
                continue
            try:
                record = open_commitment(blob, lambda message, signature: self.verify(sender, message, signature))
                where = (record.swarm, record.round, record.stage, record.sender)
                if where != (self.swarm_id, round, stage, sender):
                    raise PayloadError(f"commitment is for {where}, not ({self.swarm_id!r}, {round}, {stage}, {sender!r})")
                if record.size > self.codec.max_bytes:
                    raise PayloadError(f"commits to {record.size} bytes, over the limit of {self.codec.max_bytes}")
            except PayloadError as e:
                dropped[sender] = str(e)
                continue
            commits[sender] = record
        return commits

    def _open(self, blob: Any, commitment: Commitment, body_type: type[Body]) -> tuple[Body, ...]:
        if blob is None:
            raise PayloadError(f"{LATE} committed but revealed nothing before the deadline")
        if not isinstance(blob, bytes) or len(blob) != commitment.size or hashlib.sha256(blob).digest() != commitment.digest:
            raise PayloadError("revealed payload does not match its commitment")
        envelope = self.codec.decode(blob, body_type)
        if (envelope.sender, envelope.round, envelope.stage) != (commitment.sender, commitment.round, commitment.stage):
            raise PayloadError(
                f"envelope says {envelope.sender} r{envelope.round}/s{envelope.stage}, its commitment "
                f"{commitment.sender} r{commitment.round}/s{commitment.stage}"
            )
        return tuple(envelope.bodies)


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)
