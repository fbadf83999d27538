"""Membership records: who is in the swarm, where to reach it, which round it plays.

Each peer keeps one small signed record on the DHT under ``<swarm>/members``, subkey = its peer
id, and renews it every ``liveness_timeout / 3`` seconds; the DHT expires it after
``liveness_timeout``. A member counts as alive while its newest record, or the last traffic
from it, is younger than that (a busy DHT can be slow to show renewals; a dead peer sends none).

A record counts only if its signature verifies under the peer id it is stored for (the id
embeds the Ed25519 key), so nobody can announce, renew or kill another peer's membership. The
same check runs inside every honest DHT node (``MemberValidator``), which refuses to store a
forged record at all, and again on reading (a DHT node may answer anything).

Records are a few hundred bytes: a thousand members stay far below p2pd's 4 MiB per message.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from genrl_swarm.core.decoders import msgpack_decoder
from genrl_swarm.core.identity import SIGNATURE_BYTES, Identity, verify
from genrl_swarm.protocol.view import alive, attested_round

__all__ = ["MemberRecord", "MemberValidator", "MemberView", "attested_round", "members_key", "merge", "open_member", "seal"]

DOMAIN = b"genrl-swarm/v2/member/"
MAX_RECORD_BYTES = 2048
MAX_MADDRS = 8
#: A record issued this far in the future (clock skew) is still believed; further is refused,
#: so a peer cannot stay "alive" after it died by signing records dated ahead.
MAX_SKEW = 5.0
#: The longest a record may ask the DHT to keep it. The owner signs its expiry, so a replayed
#: old record can never outlive (and so shadow) the owner's newer ones.
MAX_LIFETIME = 120.0
_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
_Maddr = Annotated[str, msgspec.Meta(max_length=256)]


class MemberRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    swarm: _Name
    peer: _Name
    round: Annotated[int, msgspec.Meta(ge=-1)]  # the latest round it exchanged in (-1: none yet)
    issued: float  # DHT time (seconds since the epoch) it was signed
    expires: float  # the DHT expiration its owner stores it with
    maddrs: Annotated[tuple[_Maddr, ...], msgspec.Meta(max_length=MAX_MADDRS)]
    incarnation: int  # random per process: tells a twin using the same identity from a restart
    leaving: bool = False  # the peer closed: nobody waits for it any more
    #: The run it plays (``comm.epoch``; ``hivemind.genesis``): members of another are not members of this one.
    epoch: Annotated[bytes, msgspec.Meta(max_length=16)] = b""
    #: This process (``incarnation``) has loaded and reached its first exchange: it commits from
    #: now on. Until then it is not counted toward ``min_peers`` nor waited for in full (``ready``).
    ready: bool = False


class SignedMember(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    record: Annotated[bytes, msgspec.Meta(max_length=MAX_RECORD_BYTES)]
    signature: Annotated[bytes, msgspec.Meta(min_length=SIGNATURE_BYTES, max_length=SIGNATURE_BYTES)]


_signed = msgpack_decoder(SignedMember)
_record = msgpack_decoder(MemberRecord)


def seal(record: MemberRecord, identity: Identity) -> bytes:
    raw = msgspec.msgpack.encode(record)
    return msgspec.msgpack.encode(SignedMember(raw, identity.sign(DOMAIN + raw)))


def open_member(data: Any, subkey: Any, swarm: str, now: float | None = None) -> MemberRecord | None:
    """The record in ``data`` if it is signed by the peer id ``subkey``, names that peer and
    ``swarm``, and is not dated too far ahead; None for anything else (ignored, never raised)."""
    if not isinstance(data, bytes) or not isinstance(subkey, str) or len(data) > MAX_RECORD_BYTES + 128:
        return None
    record = _verified(data, subkey)
    if record is None:
        return None
    now = time.time() if now is None else now
    if record.peer != subkey or record.swarm != swarm or not math.isfinite(record.issued) or record.issued > now + MAX_SKEW:
        return None
    if not record.issued <= record.expires <= record.issued + MAX_LIFETIME:
        return None
    return record


@functools.lru_cache(maxsize=4096)
def _verified(data: bytes, subkey: str) -> MemberRecord | None:
    """Signature check and decoding, cached: every DHT answer repeats the same few records, and
    each DHT node validates every record of every answer it relays."""
    try:
        signed = _signed.decode(data)
        if not verify(subkey, DOMAIN + signed.record, signed.signature):
            return None
        return _record.decode(signed.record)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def members_key(swarm: str) -> str:
    return f"{swarm}/members"


class MemberValidator:
    """A hivemind record validator: inside each DHT node, refuse member records that do not
    open (forged, replayed under another id, dated ahead) or whose DHT expiration is later than
    the expiry their owner signed. Other keys are not ours to judge."""

    def __init__(self, swarm: str) -> None:
        import msgpack
        from hivemind.dht.routing import DHTID
        from hivemind.utils import MSGPackSerializer

        self.swarm = swarm
        self._key = DHTID.generate(source=members_key(swarm)).to_bytes()
        self._loads = MSGPackSerializer.loads
        self._errors = (ValueError, TypeError, msgpack.exceptions.UnpackException)

    def validate(self, record: Any) -> bool:
        if record.key != self._key:
            return True
        try:
            subkey, value = self._loads(record.subkey), self._loads(record.value)
        except self._errors:
            return False  # unparseable under our key: refuse
        member = open_member(value, subkey, self.swarm)
        return member is not None and record.expiration_time <= member.expires

    # The rest of hivemind's RecordValidatorBase interface: we neither sign nor strip values.
    def sign_value(self, record: Any) -> bytes:
        return bytes(record.value)

    def strip_value(self, record: Any) -> bytes:
        return bytes(record.value)

    @property
    def priority(self) -> int:
        return 0

    def merge_with(self, other: Any) -> bool:
        return False


@dataclass(frozen=True)
class MemberView:
    """The newest valid record of every member seen."""

    records: Mapping[str, MemberRecord]

    def live(self, liveness_timeout: float, sightings: Mapping[str, float], now: float | None = None) -> dict[str, MemberRecord]:
        """Members that have not left and were heard of (a renewed record, or traffic in
        ``sightings``) within ``liveness_timeout``."""
        now = time.time() if now is None else now
        return {p: r for p, r in self.records.items() if alive(max(r.issued, sightings.get(p, 0.0)), r.leaving, now, liveness_timeout)}


def merge(old: Mapping[str, MemberRecord], found: Mapping[str, MemberRecord]) -> dict[str, MemberRecord]:
    """Newest record per peer: a DHT answer holding an older copy never moves one back."""
    out = dict(old)
    for peer, record in found.items():
        if peer not in out or record.issued >= out[peer].issued:
            out[peer] = record
    return out
