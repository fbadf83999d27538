"""Honest peers never punish each other over what they received (issue 28, point 1).

Later-stage inputs are built from earlier answers; two honest peers that received different
earlier payloads used to build different inputs, refuse each other's later-stage bodies and
quarantine each other. Now a payload names the earlier payloads its inputs were built from (their
signed commitments); a receiver holding them rebuilds the sender's inputs and keeps its bodies,
one that does not drops them as a difference of view, never counted. Each scenario below is one
the issue saw on the old code, played by real GameManagers on an in-memory board.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from genrl_swarm.comm import InMemoryBackend, InMemorySwarm
from genrl_swarm.comm.base import Phase, RawExchange
from genrl_swarm.comm.codec import Codec, Commitment, encode_signed
from genrl_swarm.comm.epoch import Epoch
from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core import Body, DataManager, GameConfig, GameManager, GameState, Policy, StageInput, Task, Weights
from genrl_swarm.core.admission import admit
from genrl_swarm.core.identity import Identity
from genrl_swarm.core.types import Drop, RoundResult
from genrl_swarm.games.multistage_math import MultistageMathData, MultistageReward

from helpers import Echo, echo

TASKS = 5


class Questions(DataManager):
    def round_tasks(self, round: int) -> list[Task]:
        return [Task.create(f"r{round}: what is {i} + 3?", answer=str(i + 3)) for i in range(TASKS)]


class Scripted(Policy):
    """Answers right at stage 0, picks student #1 at stage 1, answers again at stage 2."""

    body_type = Echo

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        reply = {0: "<answer>{}</answer>", 1: "Choice: Student #1", 2: "<answer>{}</answer>"}[stage]
        return [echo(i, reply.format(int(i.prompt.split("what is ")[1].split(" +")[0]) + 3)) for i in inputs]

    def texts(self, body: Body) -> tuple[str, ...]:
        assert isinstance(body, Echo)
        return body.outputs

    def load_weights(self, weights: Weights) -> None: ...

    def save(self, directory: Path) -> None: ...

    def load(self, directory: Path) -> None: ...


def msm() -> MultistageMathData:
    return MultistageMathData(source=Questions())


# Keyed by the manager itself, weakly: a key of id(manager) outlived its manager, and a later
# test's manager born at the same address inherited an earlier test's drops.
DROPS: weakref.WeakKeyDictionary[GameManager, list[Drop]] = weakref.WeakKeyDictionary()  # every drop of every round
STATES: weakref.WeakKeyDictionary[GameManager, GameState] = weakref.WeakKeyDictionary()  # its last round's state


def manager_drops(manager: GameManager) -> list[Drop]:
    return DROPS.get(manager, [])


def keep(manager: GameManager, state: GameState, rewards: Any) -> None:
    DROPS.setdefault(manager, []).extend(state.drops)
    STATES[manager] = state


def play(
    comms: Sequence[InMemoryBackend], rounds: int = 2, timeout: float = 3.0, stages: int = 3
) -> dict[str, tuple[list[RoundResult], GameManager]]:
    """Honest multistage_math peers play; their results and managers by peer id."""
    out: dict[str, tuple[list[RoundResult], GameManager]] = {}

    def run(comm: InMemoryBackend) -> None:
        config = GameConfig(num_stages=stages, max_rounds=rounds, exchange_timeout=timeout)
        manager = GameManager(msm(), MultistageReward(), Scripted(), None, comm, LocalCoordinator(), config)
        manager.hooks.after_rewards.append(keep)
        out[comm.peer_id] = (manager.run(), manager)

    threads = [threading.Thread(target=run, args=(c,)) for c in comms]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def stage0_payload(identity: Identity, round: int, answer: str, epoch: Epoch) -> tuple[bytes, bytes]:
    """An envelope of stage-0 answers under ``identity`` and its signed commitment in ``epoch``."""
    state = GameState(round, identity.peer_id)
    state.set_tasks(Questions().round_tasks(round))
    payload = Codec().encode(identity.peer_id, round, 0, [echo(i, f"<answer>{answer}</answer>") for i in msm().stage_inputs(state, 0)])
    record = Commitment("genrl-swarm", epoch.value, round, 0, identity.peer_id, hashlib.sha256(payload).digest(), len(payload))
    return payload, encode_signed("commit", record, identity.sign)


class TwoFaced(InMemoryBackend):
    """A peer of a transport that serves each puller apart (as HiveMind does): what this peer
    collects from ``faces``' senders is what they chose to show *it*."""

    faces: dict[tuple[str, str, int, int, Phase], bytes] = {}  # (receiver, sender, round, stage, phase) -> bytes
    hidden: set[tuple[str, str, int]] = set()  # (receiver, sender, stage): never arrives

    def _exchange_bytes(self, round: int, stage: int, phase: Phase, data: bytes, timeout: float, wait_for: Any = None) -> RawExchange:
        raw = super()._exchange_bytes(round, stage, phase, data, timeout, wait_for)
        got = {s: self.faces.get((self.peer_id, s, round, stage, phase), b) for s, b in raw.payloads.items()}
        got = {s: b for s, b in got.items() if (self.peer_id, s, stage) not in self.hidden or phase == "commit"}
        return RawExchange(got, raw.expected, raw.missing)


def quarantines(manager: GameManager) -> dict[str, str]:
    return dict(manager.book.reasons)


def test_an_equivocating_sender_does_not_make_honest_peers_quarantine_each_other_and_is_caught() -> None:
    swarm = InMemorySwarm()
    a, b = TwoFaced(swarm, "A"), TwoFaced(swarm, "B")
    liar = Identity.generate()
    TwoFaced.faces = {}
    for r in range(2):  # shows A one set of answers and B another, each validly signed
        (pa, ca), (pb, cb) = stage0_payload(liar, r, "7", swarm.epoch), stage0_payload(liar, r, "9", swarm.epoch)
        swarm.post(r, 0, "commit", liar.peer_id, ca)
        swarm.post(r, 0, "reveal", liar.peer_id, pa)
        TwoFaced.faces |= {("B", liar.peer_id, r, 0, "commit"): cb, ("B", liar.peer_id, r, 0, "reveal"): pb}
    out = play([a, b])
    for peer, other in (("A", "B"), ("B", "A")):
        results, manager = out[peer]
        assert other not in quarantines(manager), quarantines(manager)  # before: B quarantined A (10 refused bodies)
        assert quarantines(manager)[liar.peer_id].startswith("equivocation: signed two commitments for r0")
        assert all(d.peer_id == liar.peer_id for d in manager_drops(manager))
    # Round 0: each sees the other's later-stage bodies built on the other face, fetches that face
    # by its signed digest from the other (issue 42.2), rebuilds and keeps them (before: dropped as
    # a difference of view at stages 1 and 2); round 1: the liar is quarantined, nothing to fetch.
    (r0, r1), manager = out["A"]
    assert r0.metrics["views/fetched_s1"] == 1 and r0.metrics["views/dropped_s1"] == r0.metrics["views/dropped_s2"] == 0
    assert (
        r0.metrics["swarm/refused_s1"] == 1  # the liar's drop: equivocation
        and r0.metrics["swarm/peers_s1"] == r0.metrics["swarm/peers_s2"] == 2
        and r1.metrics["swarm/refused_s1"] == 0
        and r1.metrics["swarm/peers_s1"] == 2
        and r1.metrics["swarm/peers_s2"] == 2
    )
    assert sorted(r1.rewards) == ["A", "B"] and r1.dropped == {}


def test_a_peer_that_received_less_is_rebuilt_by_one_that_received_more() -> None:
    swarm = InMemorySwarm()
    a, b, c = TwoFaced(swarm, "A"), TwoFaced(swarm, "B"), TwoFaced(swarm, "C")
    TwoFaced.faces, TwoFaced.hidden = {}, {("B", "C", 0)}  # C's stage-0 answers never reach B
    try:
        out = play([a, b, c], rounds=1)
    finally:
        TwoFaced.hidden = set()
    (ra,), ma = out["A"]
    (rb,), mb = out["B"]
    assert not quarantines(ma) and not quarantines(mb) and not quarantines(out["C"][1])
    # A holds every payload B built from (A's and B's): it rebuilds B's listing and keeps B's
    # bodies at stages 1 and 2, scored against that listing (before: refused, answers input X).
    assert ra.metrics["swarm/refused_s1"] == 0 and ra.metrics["swarm/refused_s2"] == 0 and ra.metrics["swarm/peers_s1"] == 3
    b_pick = next(r for r in STATES[ma].select(stage=1, peer="B"))
    assert b_pick.input is not None and len(b_pick.input.context["students"]) == 2 and ra.rewards["B"] == 1.0
    # B does not hold C's stage-0 payload, which A and C built on: it fetches it by its signed
    # digest (issue 42.2) and keeps their later bodies (before: dropped as a difference of view).
    assert not [d for d in manager_drops(mb) if d.stage > 0]
    assert rb.metrics["views/fetched_s1"] == 1 and rb.metrics["views/dropped_s1"] == rb.metrics["views/dropped_s2"] == 0
    assert rb.metrics["swarm/refused_s1"] == 0 and rb.metrics["swarm/peers_s1"] == 3
    assert rb.metrics["trust/quarantined"] == 0 and set(mb.book.drops) == {("C", "late")}
    assert not STATES[mb].select(stage=0, peer="C")  # context only: C's answers are neither scored nor trained on here


def stage_zero_from(senders: list[str]) -> tuple[GameManager, GameState, str]:
    """A 3-stage multistage_math peer whose round-0 state holds stage-0 answers of ``senders``
    (and its own), each payload recorded under a digest: what later-stage inputs are built from."""
    (comm,) = InMemoryBackend.spawn(1)
    manager = GameManager(msm(), MultistageReward(), Scripted(), None, comm, LocalCoordinator(), GameConfig(num_stages=3))
    state = GameState(0, comm.peer_id)
    state.set_tasks(Questions().round_tasks(0))
    inputs = msm().stage_inputs(state, 0)
    received = {p: [echo(x, f"<answer>{i}</answer>") for x in inputs] for i, p in enumerate(senders)}
    received[comm.peer_id] = [echo(x, "<answer>3</answer>") for x in inputs]
    admit(state, 0, inputs, received, derive=Scripted().texts)
    state.sources[0] = {p: hashlib.sha256(p.encode()).hexdigest() for p in received}
    return manager, state, comm.peer_id


def test_a_later_prompt_lists_a_bounded_number_of_answers_from_a_thousand_senders() -> None:
    manager, state, me = stage_zero_from([f"sybil-{i:04d}" for i in range(1000)])
    later, basis = manager._stage_inputs(state, 1)
    assert all(len(i.context["students"]) == 16 for i in later)  # before: 1,001 students, a 78k-token prompt
    assert len(basis) == 16 and me in {r.sender for r in basis}
    again, same = manager._stage_inputs(state, 1)  # the same choice every time, on every peer with these payloads
    assert same == basis and [i.digest for i in again] == [i.digest for i in later]


def test_a_strangers_posts_under_a_members_id_before_it_joined_do_not_frame_it() -> None:
    swarm = InMemorySwarm()
    a = InMemoryBackend(swarm, "A")
    junk = Identity.generate()
    for r in range(2):  # a stranger fills B's slots before B joins (a valid record of its own key)
        payload, commit = stage0_payload(junk, r, "1", swarm.epoch)
        swarm.post(r, 0, "commit", "B", commit)
        swarm.post(r, 0, "reveal", "B", payload)
    b = InMemoryBackend(swarm, "B")
    out = play([a, b], stages=1)
    for peer in ("A", "B"):
        results, manager = out[peer]
        assert not quarantines(manager) and all(sorted(r.rewards) == ["A", "B"] for r in results)  # before: A quarantined B


def test_a_members_reveal_before_anyone_committed_does_not_close_the_commit_window() -> None:
    swarm = InMemorySwarm()
    peers = [InMemoryBackend(swarm, p) for p in ("A", "B")]
    early = InMemoryBackend(swarm, "E")
    for r in range(3):  # E reveals first, commits never: before, nobody's commitment was collected
        swarm.post(r, 0, "reveal", "E", b"whatever", early._handle)
    early.close()  # leaves: nobody waits for it
    out = play(peers, rounds=3, stages=1)
    for peer in ("A", "B"):
        results, manager = out[peer]
        assert all(sorted(r.rewards) == ["A", "B"] for r in results) and not quarantines(manager)
