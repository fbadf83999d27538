"""Equivocation is caught with proof (issue 28, point 2).

Two validly signed commitments by one sender for one (round, stage) with different digests are
evidence anyone can check. A peer that sees both (in a phase, in another payload's basis, or as
evidence passed on) quarantines the sender at once and passes the pair on in its next payloads;
a forged pair frames nobody: it is the passer's payload that is dropped.
"""

from __future__ import annotations

import hashlib
import threading

from genrl_swarm.comm import InMemoryBackend, InMemorySwarm
from genrl_swarm.comm.codec import Commitment, encode_signed, read_commitment
from genrl_swarm.comm.commitments import Proof
from genrl_swarm.comm.epoch import Epoch
from genrl_swarm.comm.signed_log import SignedLog
from genrl_swarm.core.identity import Identity, verify
from genrl_swarm.core.interfaces import ExchangeResult
from genrl_swarm.core.types import Ref

from helpers import Echo


def signed(identity: Identity, round: int, stage: int, content: bytes, epoch: Epoch, signer: Identity | None = None) -> tuple[Commitment, bytes]:
    record = Commitment("genrl-swarm", epoch.value, round, stage, identity.peer_id, hashlib.sha256(content).digest(), len(content))
    return record, encode_signed("commit", record, (signer or identity).sign)


def exchange_all(backends: list[InMemoryBackend], round: int, stage: int, basis: dict[str, list[Ref]] | None = None) -> dict[str, ExchangeResult]:
    out: dict[str, ExchangeResult] = {}

    def run(b: InMemoryBackend) -> None:
        out[b.peer_id] = b.exchange(round, stage, [], 2.0, Echo, basis=(basis or {}).get(b.peer_id, ()))

    threads = [threading.Thread(target=run, args=(b,)) for b in backends]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_a_proof_is_passed_on_and_convinces_a_peer_that_never_saw_either_commitment() -> None:
    swarm = InMemorySwarm()
    witness, other = InMemoryBackend(swarm, "witness"), InMemoryBackend(swarm, "other")
    liar = Identity.generate()
    for content in (b"face for A", b"face for B"):
        witness.ledger.remember(*signed(liar, 0, 0, content, swarm.epoch))
    assert set(witness.proofs) == {liar.peer_id}  # the witness holds the pair
    got = exchange_all([witness, other], 0, 1)
    why = got["other"].equivocators[liar.peer_id]  # before: no such thing as a proof
    assert why.startswith("signed two commitments for r0") and liar.peer_id in other.proofs
    proof = other.proofs[liar.peer_id]
    records = [read_commitment(b, verify) for b in (proof.first, proof.second)]
    assert {r.sender for r in records} == {liar.peer_id} and records[0].digest != records[1].digest  # checkable by anyone
    assert got["witness"].equivocators == {}  # reported once, when found


def test_a_forged_proof_frames_nobody_and_drops_the_forgers_payload() -> None:
    swarm = InMemorySwarm()
    forger, me = InMemoryBackend(swarm, "forger"), InMemoryBackend(swarm, "me")
    victim = Identity.generate()
    real, forged = signed(victim, 0, 0, b"real", swarm.epoch)[1], signed(victim, 0, 0, b"forged", swarm.epoch, signer=Identity.generate())[1]
    forger.proofs[victim.peer_id] = Proof(0, real, forged)
    got = exchange_all([forger, me], 0, 1)["me"]
    assert got.equivocators == {} and victim.peer_id not in me.proofs
    assert "does not verify" in got.dropped["forger"] and "forger" not in got.late  # provable: a hard drop


def test_a_basis_naming_a_later_stage_or_another_round_is_a_provable_drop() -> None:
    swarm = InMemorySwarm()
    liar, me = InMemoryBackend(swarm, "liar"), InMemoryBackend(swarm, "me")
    ahead = signed(Identity.generate(), 0, 3, b"x", swarm.epoch)
    liar.ledger.remember(*ahead)
    got = exchange_all([liar, me], 0, 1, {"liar": [Ref(3, ahead[0].sender, ahead[0].digest.hex())]})["me"]
    assert "not an earlier stage of r0" in got.dropped["liar"]


def test_an_honest_basis_arrives_verified_and_names_what_was_received() -> None:
    swarm = InMemorySwarm()
    a, b = InMemoryBackend(swarm, "a"), InMemoryBackend(swarm, "b")
    first = exchange_all([a, b], 0, 0)
    refs = {p: [Ref(0, s, d) for s, d in sorted(first[p].digests.items())] for p in ("a", "b")}
    assert refs["a"] == refs["b"] and len(refs["a"]) == 2
    second = exchange_all([a, b], 0, 1, refs)
    assert second["a"].bases["b"] == tuple(refs["b"]) and second["a"].dropped == {} and second["a"].equivocators == {}


def test_a_peer_killed_mid_round_and_resumed_never_signs_twice(tmp_path) -> None:
    """Killed after signing r0/s0 and resumed at round 0 in the same run (the others played on),
    an honest peer must not sign a second, different commitment for r0/s0: it sits that exchange
    out, and nobody holds a proof against it."""
    swarm = InMemorySwarm()
    other, first = InMemoryBackend(swarm, "other"), InMemoryBackend(swarm, "victim")
    first.bind_run(tmp_path, resume=False)
    got = exchange_all([other, first], 0, 0)
    assert "victim" in got["other"].received and first.signed_log is not None and first.signed_log.last(swarm.epoch) == (0, 0)
    first.close()  # killed
    again = InMemoryBackend(swarm, "victim", identity=first.identity)  # the same identity, restarted
    again.bind_run(tmp_path, resume=True)  # resumed or started over: the log outlives both
    stale = again.exchange(0, 0, [Echo("t", "d" * 64, ("a different sample",))], 0.5, Echo)
    assert stale.received == {"victim": (Echo("t", "d" * 64, ("a different sample",)),)}  # sat out: nothing signed
    assert again.signed_log is not None and again.signed_log.last(swarm.epoch) == (0, 0)
    got = exchange_all([other, again], 0, 1)  # the next exchange it had not signed: it plays
    assert set(got["other"].received) == {"other", "victim"}
    assert not other.proofs and not got["other"].equivocators


def test_without_the_log_a_resumed_peer_would_be_proven_an_equivocator() -> None:
    """The failure the log prevents: the resumed peer's new commitment for r0/s0 (another sample,
    another digest) next to its first one is a proof against it."""
    swarm = InMemorySwarm()
    other, first = InMemoryBackend(swarm, "other"), InMemoryBackend(swarm, "victim")
    exchange_all([other, first], 0, 0)
    content = b"the resumed peer's other sample"
    record = Commitment("genrl-swarm", swarm.epoch.value, 0, 0, "victim", hashlib.sha256(content).digest(), len(content))
    other.ledger.remember(record, encode_signed("commit", record, first.identity.sign))
    assert "victim" in other.proofs


def test_the_log_is_kept_per_epoch(tmp_path) -> None:
    """What an identity signed in one run binds it in that run only: no record pairs across epochs."""
    old, new = Epoch.new(), Epoch.new()
    peer = InMemoryBackend(InMemorySwarm(epoch=old), "p")
    peer.bind_run(tmp_path, resume=False)
    peer.exchange(5, 0, [], 0.1, Echo)
    again = InMemoryBackend(InMemorySwarm(epoch=new), "p", identity=peer.identity)
    again.bind_run(tmp_path, resume=False)
    again.exchange(0, 0, [], 0.1, Echo)
    assert again._signed_before is None  # a new run: it owes nothing to the old one's rounds
    assert again.signed_log is not None and again.signed_log.last(old) == (5, 0) and again.signed_log.last(new) == (0, 0)
    (tmp_path / "last_signed").write_text("5 0 genrl-swarm")  # the log before epochs: its records named none
    assert SignedLog(tmp_path / "last_signed").last(old) is None


def test_an_old_proof_passed_as_evidence_is_not_replayed_forever() -> None:
    """Found by a hostile review: one honest restart's pair, kept by a stranger, re-quarantined
    the honest peer on demand at any later round. Evidence older than KEEP_ROUNDS is ignored."""
    from genrl_swarm.comm.base import KEEP_ROUNDS
    from genrl_swarm.core.bodies import Envelope

    swarm = InMemorySwarm()
    other, victim = InMemoryBackend(swarm, "other"), InMemoryBackend(swarm, "victim")
    pair = []
    for content in (b"first sample", b"second sample"):
        record = Commitment(other.swarm_id, swarm.epoch.value, 3, 0, "victim", hashlib.sha256(content).digest(), len(content))
        pair.append(encode_signed("commit", record, victim.identity.sign))
    late = Envelope(3, "stranger", 3 + KEEP_ROUNDS + 44, 0, (), evidence=tuple(pair))
    other.ledger.references(late, other.verify)
    assert "victim" not in other.proofs
    fresh = Envelope(3, "stranger", 3 + KEEP_ROUNDS, 0, (), evidence=tuple(pair))
    other.ledger.references(fresh, other.verify)
    assert "victim" in other.proofs  # the same pair within the window is a proof
