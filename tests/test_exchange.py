"""Exchanges drop bad payloads, count them, name the sender, and keep the round going."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from genrl_swarm.comm import InMemoryBackend, InMemorySwarm, NullBackend
from genrl_swarm.comm.codec import Codec
from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core import GameConfig, GameManager, Task

from helpers import Echo, RecordingGame, Stranger, echo


def rollout(peer: str, r: int = 0, s: int = 0, text: str = "x") -> Echo:
    return echo(Task.create("q").input(s), text)


def test_garbage_and_spoofed_payloads_are_dropped(caplog: pytest.LogCaptureFixture) -> None:
    swarm = InMemorySwarm()
    me = InMemoryBackend(swarm, "me")
    garbage, spoofer, liar, honest = (Stranger(swarm) for _ in range(4))
    garbage.swarm.post(0, 0, "commit", garbage.peer_id, b"\x00\xff not msgpack")
    spoofer.send(0, 0, [rollout("me")], envelope_sender="me")  # claims to be me inside its envelope
    liar.commit(0, 0, Codec().encode(liar.peer_id, 5, 0, [rollout("liar", r=5)]))  # commits for round 0 ...
    liar.reveal(0, 0, Codec().encode(liar.peer_id, 5, 0, [rollout("liar", r=5)]))  # ... an envelope for round 5
    honest.send(0, 0, [rollout("honest")])
    with caplog.at_level(logging.WARNING):
        result = me.exchange(0, 0, [rollout("me")], timeout=1.0, body_type=Echo)
    assert sorted(result.received) == sorted(["me", honest.peer_id])
    assert sorted(result.dropped) == sorted([garbage.peer_id, spoofer.peer_id, liar.peer_id])
    assert me.dropped_total == 3
    assert f"dropped payload from {garbage.peer_id}" in caplog.text


def test_a_member_slot_cannot_be_written_by_anyone_else() -> None:
    swarm = InMemorySwarm()
    InMemoryBackend(swarm, "me")
    with pytest.raises(PermissionError):
        swarm.post(0, 0, "commit", "me", b"overwrite")


def test_exchange_returns_at_deadline_with_what_arrived() -> None:
    swarm = InMemorySwarm()
    a, _silent = InMemoryBackend(swarm, "a"), InMemoryBackend(swarm, "silent")
    start = time.monotonic()
    result = a.exchange(0, 0, [rollout("a")], timeout=0.3)
    assert 0.2 <= time.monotonic() - start < 5  # the commit phase's share of the deadline
    assert result.summary() == "got 1 of 2, dropped 1" and result.late == {"silent"}


def test_oversized_own_payload_is_refused_before_sending() -> None:
    swarm = InMemorySwarm()
    a = InMemoryBackend(swarm, "a", max_bytes=64)
    with pytest.raises(ValueError, match="over the limit"):
        a.exchange(0, 0, [rollout("a", text="p" * 100)], timeout=0.1)
    assert not swarm.collect(0, 0, "commit", timeout=0)


def test_duplicate_peer_id_refused() -> None:
    swarm = InMemorySwarm()
    InMemoryBackend(swarm, "a")
    with pytest.raises(ValueError, match="already in this swarm"):
        InMemoryBackend(swarm, "a")


def test_round_goes_on_with_a_bad_peer_in_the_swarm() -> None:
    """A full game among 2 honest peers while a third posts garbage every stage."""
    comms = InMemoryBackend.spawn(2)
    swarm = comms[0].swarm  # type: ignore[attr-defined]
    stop = threading.Event()

    def vandal() -> None:
        while not stop.is_set():
            for r in range(3):
                for s in range(2):
                    swarm.post(r, s, "commit", "vandal", b"\x92\x01")
            time.sleep(0.01)

    threading.Thread(target=vandal, daemon=True).start()
    # The vandal is quarantined after its first round: later rounds do not read it at all.
    results: dict[str, list] = {}

    def play(comm: InMemoryBackend) -> None:
        game = RecordingGame([])
        cfg = GameConfig(num_stages=2, max_rounds=3, exchange_timeout=5)
        results[comm.peer_id] = GameManager(game, game, game, game, comm, LocalCoordinator(), cfg).run()

    threads = [threading.Thread(target=play, args=(c,)) for c in comms]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    stop.set()
    assert sorted(results) == ["peer-0", "peer-1"]
    for rounds in results.values():
        assert [r.round for r in rounds] == [0, 1, 2]
        assert all(sorted(r.rewards) == ["peer-0", "peer-1"] for r in rounds)
        assert rounds[0].dropped == {"vandal": 2} and all(r.dropped == {} for r in rounds[1:])
        assert all(r.metrics["trust/quarantined"] == 1 for r in rounds)


def test_interrupt_ends_a_waiting_exchange_at_once() -> None:
    swarm = InMemorySwarm()
    a, _silent = InMemoryBackend(swarm, "a"), InMemoryBackend(swarm, "silent")
    threading.Timer(0.2, a.interrupt).start()
    start = time.monotonic()
    a.exchange(0, 0, [rollout("a")], timeout=30)
    assert time.monotonic() - start < 2


def test_null_backend_is_a_swarm_of_one() -> None:
    result = NullBackend("solo").exchange(0, 0, [rollout("solo")], timeout=0.1)
    assert list(result.received) == ["solo"] and result.expected == 1
