"""Every signed record names its run (issue 42, point 1; issue 41, point 4).

A commitment used to name (swarm, round, stage, sender, digest, size) and nothing tying it to one
run. Swarm names repeat (every recipe's is ``genrl-swarm``), so an identity reused in a new run
could be paired with its own commitments from an earlier run, kept by anyone, and every honest
peer quarantined it. Now a record names the run's epoch: one of another run is refused, never
stored and never a proof; evidence is read only for a window of rounds around the current one;
what a peer signed last is kept per epoch, so a new run owes nothing to an old one and a resumed
run still never signs twice. Played by real GameManagers on in-memory boards.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from genrl_swarm.comm import InMemoryBackend, InMemorySwarm
from genrl_swarm.comm.base import Phase
from genrl_swarm.comm.codec import Codec, Commitment, encode_signed
from genrl_swarm.comm.commitments import KEEP_ROUNDS
from genrl_swarm.comm.epoch import Epoch, saved_epoch
from genrl_swarm.core.identity import Identity
from test_trust_v4_views import play, quarantines

from helpers import Echo, Stranger

ROUNDS = 2


def commitments_of(swarm: InMemorySwarm, peer: str) -> dict[tuple[int, int], bytes]:
    """Every signed commitment ``peer`` posted on a board, by (round, stage): what an archiver keeps."""
    return {(r, s): board[peer] for (r, s, phase), board in list(swarm._boards.items()) if phase == "commit" and peer in board}


class Watched(InMemorySwarm):
    """A board whose watchers hear each post as it is published, as a peer on a gossip network
    does: an attacker that polled the board could be starved on a busy machine and react after
    the stage it targets had closed (then nothing was offered and the test proved nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.watchers: list[Callable[[int, int, Phase, str, bytes], None]] = []

    def post(self, round: int, stage: int, phase: Phase, sender: str, data: bytes, handle: object | None = None) -> None:
        super().post(round, stage, phase, sender, data, handle)
        for watcher in self.watchers:
            watcher(round, stage, phase, sender, data)


class Replayer:
    """Hears ``victim``'s commitments as they are posted and passes each on at the next stage,
    beside the victim's commitment for the same (round, stage) from an earlier run: as a pair of
    evidence (one stranger) and in a basis (another). It posts before the victim's post returns,
    so before any honest peer can reach the next stage: every pair is on the board in time."""

    def __init__(self, swarm: Watched, victim: str, old: dict[tuple[int, int], bytes]) -> None:
        self.victim, self.old = victim, old
        self.evidence, self.basis = Stranger(swarm), Stranger(swarm)
        self.done: set[tuple[int, int]] = set()
        swarm.watchers.append(self.heard)

    def heard(self, round: int, stage: int, phase: Phase, sender: str, new: bytes) -> None:
        if sender != self.victim or phase != "commit" or (round, stage) not in self.old or stage + 1 >= 3:
            return
        self.done.add((round, stage))
        old = self.old[(round, stage)]
        self.post(self.evidence, round, stage + 1, Codec().encode(self.evidence.peer_id, round, stage + 1, [], evidence=(old, new)))
        self.post(self.basis, round, stage + 1, Codec().encode(self.basis.peer_id, round, stage + 1, [], basis=(old,)))

    @staticmethod
    def post(stranger: Stranger, round: int, stage: int, payload: bytes) -> None:
        stranger.commit(round, stage, payload)
        stranger.reveal(round, stage, payload)


def test_an_identity_reused_in_a_new_run_is_never_framed_by_its_old_commitments() -> None:
    victim = Identity.generate()
    first = InMemorySwarm()
    play([InMemoryBackend(first, "A"), InMemoryBackend(first, "V", identity=victim)], rounds=ROUNDS)
    old = commitments_of(first, "V")  # kept by anyone who watched the first run
    assert len(old) == ROUNDS * 3
    second = Watched()  # a new run of a swarm of the same name; V's operator reuses its identity file
    replayer = Replayer(second, "V", old)
    out = play([InMemoryBackend(second, "A"), InMemoryBackend(second, "V", identity=victim)], rounds=ROUNDS)
    assert len(replayer.done) == ROUNDS * 2  # every pair was offered
    for peer, other in (("A", "V"), ("V", "A")):
        results, manager = out[peer]
        assert other not in quarantines(manager), quarantines(manager)  # before: V quarantined by A in every round
        assert other not in manager.comm.proofs and all(sorted(r.rewards) == ["A", "V"] for r in results)
        assert not set(old.values()) & {blob for _, blob in manager.comm.ledger.slots.values()}  # none of them stored
        # Naming another run's record in a basis is provable against whoever names it; evidence
        # outside this run is not read (an honest peer may relay what it cannot check).
        assert quarantines(manager)[replayer.basis.peer_id].startswith("payload: its basis names")
        assert replayer.evidence.peer_id not in quarantines(manager)


def test_evidence_of_another_run_or_far_rounds_is_refused_and_never_stored() -> None:
    swarm = InMemorySwarm()
    me, passer, victim = InMemoryBackend(swarm, "me"), Stranger(swarm), Identity.generate()
    now = 10

    def pair(round: int, epoch: Epoch) -> tuple[bytes, bytes]:
        records = [Commitment("genrl-swarm", epoch.value, round, 0, victim.peer_id, bytes([i]) * 32, 8) for i in (1, 2)]
        a, b = (encode_signed("commit", record, victim.sign) for record in records)
        return a, b

    evidence = (
        *pair(now + 10**6, swarm.epoch),  # far future: was a proof, and never pruned
        *pair(now + 1, swarm.epoch),  # the next round: honest peers have signed nothing there yet
        *pair(now, Epoch.new()),  # another run
        *pair(now - KEEP_ROUNDS - 1, swarm.epoch),  # past the window
    )
    payload = Codec().encode(passer.peer_id, now, 0, [], evidence=evidence)
    passer.commit(now, 0, payload)
    passer.reveal(now, 0, payload)
    result = me.exchange(now, 0, [], 0.5, Echo)
    assert result.equivocators == {} and victim.peer_id not in me.proofs
    assert passer.peer_id in result.received and not any(slot[2] == victim.peer_id for slot in me.ledger.slots)
    inside = Codec().encode(passer.peer_id, now + 1, 0, [], evidence=pair(now + 1 - KEEP_ROUNDS, swarm.epoch))
    passer.commit(now + 1, 0, inside)
    passer.reveal(now + 1, 0, inside)
    assert victim.peer_id in me.exchange(now + 1, 0, [], 0.5, Echo).equivocators  # inside the window it is a proof


def test_a_new_run_owes_nothing_to_an_old_one_and_a_resumed_one_never_signs_twice(tmp_path: Path) -> None:
    """One run directory, one identity: run 1, then a new run in the same directory (the log
    outlives ``--overwrite``), then back into run 1, which lived on (``--resume``)."""
    victim = Identity.generate()
    first = InMemorySwarm()
    v1 = InMemoryBackend(first, "V", identity=victim)
    v1.bind_run(tmp_path, resume=False)
    a1 = InMemoryBackend(first, "A")
    play([a1, v1], rounds=ROUNDS)
    assert v1.signed_log is not None and v1.signed_log.last(first.epoch) == (ROUNDS - 1, 2)
    v1.close()
    second = InMemorySwarm()
    v2 = InMemoryBackend(second, "V", identity=victim)
    v2.bind_run(tmp_path, resume=False)
    out = play([InMemoryBackend(second, "A"), v2], rounds=ROUNDS)
    results, _ = out["A"]
    assert all(sorted(r.rewards) == ["A", "V"] for r in results)  # before: V sat out every round it had signed in run 1
    assert saved_epoch(tmp_path) == second.epoch
    v2.close()
    again = InMemoryBackend(first, "V", identity=victim)  # run 1 lived on; V comes back to it
    again.bind_run(tmp_path, resume=True)
    body = Echo("t", "d" * 24, ("another sample",))
    stale = again.exchange(ROUNDS - 1, 0, [body], 0.3, Echo)
    assert stale.received == {"V": (body,)}  # sat out: signed nothing for a slot it signed before
    assert again.signed_log is not None and again.signed_log.last(first.epoch) == (ROUNDS - 1, 2)
    assert not a1.proofs
    played = threading.Thread(target=a1.exchange, args=(ROUNDS, 0, [], 2.0, Echo))
    played.start()
    assert set(again.exchange(ROUNDS, 0, [], 2.0, Echo).received) == {"A", "V"}  # the next slot: it plays
    played.join()
    assert not a1.proofs and again.signed_log.last(first.epoch) == (ROUNDS, 0)
