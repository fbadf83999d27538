"""Equivocation on real p2pd peers (issue 28, points 1 and 2): HiveMind serves each puller
apart, so one sender can show each honest peer other answers under two valid signatures.

Two honest ``multistage_math`` peers and a liar, each a real HivemindBackend on 127.0.0.1. The
liar's slot server answers B from a second store (the one line a modified peer changes). Before,
B refused all of A's later-stage bodies (built on the other face) and quarantined A; now each
honest peer proves the liar's equivocation from the other's basis and quarantines only it.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import genrl_swarm.comm.hivemind.dht as dht
from genrl_swarm.comm.codec import Codec, Commitment, encode_signed
from genrl_swarm.comm.hivemind.dht import HivemindBackend
from genrl_swarm.comm.hivemind.streams import SlotStore
from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core import GameConfig, GameManager, GameState
from genrl_swarm.core.types import RoundResult
from genrl_swarm.games.multistage_math import MultistageReward
from test_trust_v4_views import Questions, Scripted, msm

from helpers import Echo, echo

pytestmark = pytest.mark.slow  # three p2pd daemons
SWARM, ROUNDS, STAGES = "two-faced", 2, 3


def answers(peer: str, round: int, text: str) -> list[Any]:
    state = GameState(round, peer)
    state.set_tasks(Questions().round_tasks(round))
    return [echo(i, f"<answer>{text}</answer>") for i in msm().stage_inputs(state, 0)]


@pytest.fixture
def swarm(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[HivemindBackend, HivemindBackend, HivemindBackend, SlotStore]]:
    pytest.importorskip("hivemind")  # the backend starts p2pd through it (the modules import it lazily)
    a = HivemindBackend(swarm=SWARM, liveness_timeout=3.0)
    peers = [a, *(HivemindBackend(initial_peers=a.visible_maddrs(), swarm=SWARM, liveness_timeout=3.0) for _ in range(2))]
    b, liar = peers[1], peers[2]
    face = SlotStore({})  # what the liar shows B
    serve, serve_unary = dht.serve, dht.serve_unary
    monkeypatch.setattr(
        dht, "serve", lambda store, info, *a: serve(face if store is liar.store and str(info.peer_id) == b.peer_id else store, info, *a)
    )
    monkeypatch.setattr(
        dht, "serve_unary", lambda store, req, remote: serve_unary(face if store is liar.store and str(remote) == b.peer_id else store, req, remote)
    )
    try:
        end = time.monotonic() + 20
        while not all(len(p.membership.live()) == 3 for p in peers):
            assert time.monotonic() < end, "the three peers did not see each other"
            time.sleep(0.05)
        yield a, b, liar, face
    finally:
        for p in peers:
            p.close()


def lie(liar: HivemindBackend, face: SlotStore) -> None:
    """Plays every stage; stage 0 shows A answers "7" and B (through ``face``) answers "9"."""
    for r in range(ROUNDS):
        payload = Codec().encode(liar.peer_id, r, 0, answers(liar.peer_id, r, "9"))
        record = Commitment(SWARM, liar.epoch.value, r, 0, liar.peer_id, hashlib.sha256(payload).digest(), len(payload))
        for phase, data in (("commit", encode_signed("commit", record, liar.identity.sign)), ("reveal", payload)):
            liar._loop.soon(face.put, (r, 0, phase), data)
        for s in range(STAGES):
            liar.exchange(r, s, answers(liar.peer_id, r, "7") if s == 0 else [], 20.0, Echo)


def test_an_equivocating_hivemind_peer_is_proven_and_honest_peers_keep_each_other(swarm: Any, cpu_hog: list[Any]) -> None:
    a, b, liar, face = swarm
    out: dict[str, tuple[list[RoundResult], GameManager]] = {}

    def honest(comm: HivemindBackend) -> None:
        manager = GameManager(
            msm(),
            MultistageReward(),
            Scripted(),
            None,
            comm,
            LocalCoordinator(),
            GameConfig(num_stages=STAGES, max_rounds=ROUNDS, exchange_timeout=20.0),
        )
        out[comm.peer_id] = (manager.run(), manager)

    threads = [threading.Thread(target=honest, args=(p,)) for p in (a, b)] + [threading.Thread(target=lie, args=(liar, face))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert set(out) == {a.peer_id, b.peer_id}
    for me, other in ((a, b), (b, a)):
        (r0, r1), manager = out[me.peer_id]
        assert other.peer_id not in manager.book.reasons, manager.book.reasons  # before: B quarantined A
        assert manager.book.reasons[liar.peer_id].startswith("equivocation")
        assert sorted(r1.rewards) == sorted([a.peer_id, b.peer_id]) and r1.metrics["swarm/peers_s2"] == 2
    assert all(h.poll() is None for h in cpu_hog)  # every core was busy with another process throughout


def test_peers_started_by_hand_seconds_apart_keep_each_other_in_round_0() -> None:
    """The README's flow typed by hand: the second peer starts later than the exchange timeout.
    The first waits at its ``min_peers`` gate; that wait must not eat its first exchange's
    deadline (before: it dropped the second as late in round 0)."""
    from helpers import RecordingGame

    pytest.importorskip("hivemind")
    timeout, out = 3.0, dict[str, list[RoundResult]]()
    first = HivemindBackend(swarm="by-hand", min_peers=2, min_peers_timeout=60.0, liveness_timeout=3.0)
    peers = [first]

    def run(comm: HivemindBackend) -> None:
        game = RecordingGame([])
        config = GameConfig(max_rounds=2, exchange_timeout=timeout)
        out[comm.peer_id] = GameManager(game, game, game, game, comm, LocalCoordinator(), config).run()

    try:
        threads = [threading.Thread(target=run, args=(first,))]
        threads[0].start()
        time.sleep(timeout + 2)  # typed by hand, later than the exchange timeout
        peers.append(HivemindBackend(initial_peers=first.visible_maddrs(), swarm="by-hand", min_peers=2, liveness_timeout=3.0))
        threads.append(threading.Thread(target=run, args=(peers[1],)))
        threads[1].start()
        for t in threads:
            t.join(120)
    finally:
        for p in peers:
            p.close()
    both = sorted(p.peer_id for p in peers)
    assert all(sorted(r.rewards) == both for results in out.values() for r in results), {p: [sorted(r.rewards) for r in rs] for p, rs in out.items()}
