"""The signed commitments a peer has seen, what it takes from others, and the proofs they make.

Every commitment this peer sees, in a phase or passed on (a payload's ``basis``, its
``evidence``), is remembered for ``KEEP_ROUNDS`` rounds: later stages name earlier payloads by
them, and two validly signed ones by one sender for one (epoch, round, stage) that differ are a
proof of equivocation. What is taken from others is bounded three ways, so that neither a replay
nor a flood of records costs honest peers their trust or their CPU:

* **One run.** A record names its swarm and epoch (``comm.epoch``); one of another epoch is
  refused and never remembered, so nothing signed in an earlier run of a same-named swarm pairs
  with anything signed now, whoever kept it.
* **A window of rounds.** Evidence is read for the rounds ``round - KEEP_ROUNDS .. round`` of the
  exchange carrying it: an old proof is not replayed forever, and a record for a far-future round
  is never stored (nothing prunes the future; honest peers have signed nothing there).
* **Signatures checked once, and only where they can matter.** A passed-on record byte-identical
  to one held is not checked again (honest bases repeat what every peer collected). A basis record
  for a slot this peer holds no commitment for is not checked at all: the inputs it names are
  payloads this peer does not hold, so the sender's later-stage bodies are a difference of view
  whatever the signature says (``GameManager._rebuild``); checking them let one payload of 256
  self-signed records cost 42-52 ms. Records for slots it holds are checked: a forged one drops
  the payload (provable), a valid different one is a proof.

A basis record for a slot this peer does not hold is kept, unchecked, until the next exchange
(``named``): if the game then fetches the payload it names (``core.views``), ``signed_for``
checks that one signature, charged to the sender that named it, and the record is remembered
like any other. Kept for one exchange only, so a flood of self-signed records costs memory for
as long as the payloads carrying them were held anyway.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from genrl_swarm.comm.codec import Commitment, PayloadError, Signed, signed_message
from genrl_swarm.comm.epoch import Epoch
from genrl_swarm.core.bodies import MAX_EVIDENCE, Envelope
from genrl_swarm.core.decoders import msgpack_decoder
from genrl_swarm.core.types import Ref

log = logging.getLogger(__name__)

#: Rounds signed commitments are remembered: for references from later stages and for proofs.
KEEP_ROUNDS = 2

Verify = Callable[[str, bytes, bytes], bool]  # (signer id, message, signature) -> valid
Slot = tuple[int, int, str]  # round, stage, sender

_signed = msgpack_decoder(Signed)
_record = msgpack_decoder(Commitment)


@dataclass(frozen=True)
class Proof:
    """Two validly signed commitments by one sender for one (round, stage) that differ."""

    round: int
    first: bytes
    second: bytes

    def describe(self) -> str:
        return f"signed two commitments for r{self.round}: {_short(self.first)} and {_short(self.second)}"


@dataclass
class CommitmentBook:
    """This peer's commitments seen (``slots``) and proofs found, for one swarm and epoch."""

    swarm: str
    epoch: Epoch
    slots: dict[Slot, tuple[bytes, bytes]] = field(default_factory=dict)  # -> (payload sha256, signed commitment)
    proofs: dict[str, Proof] = field(default_factory=dict)  # sender -> its proof
    #: (slot, payload sha256) -> a basis record for a slot not held, unchecked: this exchange's only.
    named: dict[tuple[Slot, bytes], bytes] = field(default_factory=dict)

    def names_this_run(self, record: Commitment) -> bool:
        return record.swarm == self.swarm and record.epoch == self.epoch.value

    def remember(self, record: Commitment, blob: bytes) -> None:
        """Keep a validly signed commitment of this run; a second one for the same slot with
        another digest is a proof of equivocation."""
        slot = (record.round, record.stage, record.sender)
        seen = self.slots.setdefault(slot, (record.digest, blob))
        if seen[0] != record.digest and record.sender not in self.proofs:
            self.proofs[record.sender] = Proof(record.round, seen[1], blob)
            log.warning("%s signed two commitments for r%d/s%d (equivocation)", record.sender, record.round, record.stage)

    def forget(self, round: int) -> None:
        """At each exchange: drop what is older than the window (nothing newer than ``round`` is
        ever stored), and the unchecked records of the exchange before."""
        self.named.clear()
        for slot in [s for s in self.slots if s[0] < round - KEEP_ROUNDS]:
            del self.slots[slot]
        for peer in [p for p, proof in self.proofs.items() if proof.round < round - KEEP_ROUNDS]:
            del self.proofs[peer]

    def signed_for(self, round: int, ref: Ref, verify: Verify) -> Commitment | None:
        """The validly signed commitment of this run naming ``ref``'s payload, or None: one this
        peer holds (either face of an equivocation), else a basis record of this exchange naming
        it, checked now (its signature, once) and remembered. What a fetch by digest trusts."""
        slot, digest = (round, ref.stage, ref.sender), bytes.fromhex(ref.digest)
        proof = self.proofs.get(ref.sender)
        held = [self.slots[slot][1]] if slot in self.slots else []
        for blob in [*held, *((proof.first, proof.second) if proof is not None and proof.round == round else ())]:
            record = _parse(blob)[0]
            if (record.round, record.stage, record.sender, record.digest) == (*slot, digest):
                return record
        blob = self.named.pop((slot, digest), None)
        if blob is None:
            return None
        record, message, signature = _parse(blob)
        if not self.names_this_run(record) or not verify(record.sender, message, signature):
            return None
        self.remember(record, blob)
        return record

    def signed(self, round: int, basis: Sequence[Ref]) -> list[bytes]:
        """The signed commitments of ``basis`` (this peer's sources), as held."""
        held = [(ref, self.slots.get((round, ref.stage, ref.sender))) for ref in basis]
        return [rec[1] for ref, rec in held if rec is not None and rec[0].hex() == ref.digest]

    def evidence(self) -> list[bytes]:
        """The newest proofs, as pairs, for this peer's next payload."""
        return [blob for proof in list(self.proofs.values())[-(MAX_EVIDENCE // 2) :] for blob in (proof.first, proof.second)]

    def references(self, envelope: Envelope[Any], verify: Verify) -> tuple[Ref, ...]:
        """The earlier payloads a sender's inputs were built from. A basis record for another
        run, round or a later stage, or a forged one for a slot held, is provable (PayloadError:
        the payload is dropped); evidence is read within the window and remembered."""
        refs = []
        for blob in envelope.basis:
            record, message, signature = _parse(blob)
            if not self.names_this_run(record) or record.round != envelope.round or record.stage >= envelope.stage:
                raise PayloadError(f"its basis names {record.sender[:64]} r{record.round}/s{record.stage}, not an earlier stage of r{envelope.round}")
            slot = (record.round, record.stage, record.sender)
            if slot in self.slots:
                self._check(record, blob, message, signature, verify)
                self.remember(record, blob)
            else:  # not checked: only a fetch of the payload it names needs it (``signed_for``)
                self.named.setdefault((slot, record.digest), blob)
            refs.append(Ref(record.stage, record.sender, record.digest.hex()))
        for blob in envelope.evidence:
            record, message, signature = _parse(blob)
            if self.names_this_run(record) and envelope.round - KEEP_ROUNDS <= record.round <= envelope.round:
                self._check(record, blob, message, signature, verify)
                self.remember(record, blob)
        return tuple(sorted(set(refs)))

    def faults(self, envelope: Envelope[Any], verify: Verify) -> list[tuple[Commitment, int]]:
        """The failed spot checks ``envelope`` passes on: each accused's commitment naming a model,
        of this run and within the window (others are ignored), and the body it names. A forged
        commitment is provable (PayloadError: the payload is dropped); a valid one is remembered
        (one that differs from a commitment held is a proof of equivocation)."""
        out = []
        for fault in envelope.faults:
            record, message, signature = _parse(fault.commitment)
            if record.model is None or not self.names_this_run(record) or not envelope.round - KEEP_ROUNDS <= record.round <= envelope.round:
                continue
            self._check(record, fault.commitment, message, signature, verify)
            self.remember(record, fault.commitment)
            out.append((record, fault.body))
        return out

    def _check(self, record: Commitment, blob: bytes, message: bytes, signature: bytes, verify: Verify) -> None:
        """The signature, unless these exact bytes are held already (checked when they came)."""
        held = self.slots.get((record.round, record.stage, record.sender))
        if held is not None and held[1] == blob:
            return
        if not verify(record.sender, message, signature):
            raise PayloadError(f"a passed-on commitment of {record.sender[:64]} does not verify under its id")


def _parse(blob: bytes) -> tuple[Commitment, bytes, bytes]:
    """A passed-on record, its signed message and signature, parsed (bounded by the codec's
    ``MAX_RECORD_BYTES``) but not verified: only its record names whose key checks it."""
    try:
        signed = _signed.decode(blob)
        record = _record.decode(signed.record)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as e:
        raise PayloadError(f"bad signed commitment: {str(e)[:200]}") from e
    return record, signed_message(signed.kind, signed.record), signed.signature


def _short(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()[:12]
