"""Timing that does not frame the honest (issue 28, point 3).

Lateness is a difference of view (load, clocks, start-up): it never quarantines. What a late or
fresh id can cost is bounded instead: committers that are not established, punctual members are
waited for ``FRESH_SHARE`` of the timeout; a transport's start gate runs before the exchange's
deadline starts (``ByteBackend.ready``). Bounds are loose: these run on a loaded machine.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from genrl_swarm.comm import InMemoryBackend, InMemorySwarm
from genrl_swarm.comm.base import FRESH_SHARE
from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core import GameConfig, GameManager
from genrl_swarm.core.types import RoundResult

from helpers import RecordingGame, Stranger


def play(comms: list[InMemoryBackend], rounds: int, timeout: float, stages: int = 1) -> dict[str, tuple[list[RoundResult], GameManager]]:
    out: dict[str, tuple[list[RoundResult], GameManager]] = {}

    def run(comm: InMemoryBackend) -> None:
        game = RecordingGame([])
        config = GameConfig(max_rounds=rounds, num_stages=stages, exchange_timeout=timeout)
        manager = GameManager(game, game, game, game, comm, LocalCoordinator(), config)
        out[comm.peer_id] = (manager.run(), manager)

    threads = [threading.Thread(target=run, args=(c,)) for c in comms]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def test_fresh_ids_that_commit_and_never_reveal_cost_a_short_wait_not_the_deadline() -> None:
    swarm = InMemorySwarm()
    comms = [InMemoryBackend(swarm, p) for p in ("A", "B")]
    for r in range(4):  # a new id every round, committed before the honest peers play
        Stranger(swarm).commit(r, 0, b"never revealed")
    timeout = 3.0
    out = play(comms, rounds=4, timeout=timeout)
    for results, manager in out.values():
        waits = [r.metrics["time/exchange_s0"] for r in results]
        assert max(waits) < 0.5 * timeout, waits  # before: 2.25 s each (the reveal's whole share); now ~FRESH_SHARE
        assert all(sorted(r.rewards) == ["A", "B"] and len(r.dropped) == 1 for r in results)
        assert manager.book.quarantined(4) == frozenset()  # late ids: remembered, never quarantined
    assert FRESH_SHARE * timeout < 0.5 * timeout


class Gated(InMemoryBackend):
    """A transport with a start gate (like HiveMind's ``min_peers``): before its first exchange
    a peer waits until ``min_peers`` members joined."""

    min_peers = 2

    def ready(self) -> None:
        deadline = time.monotonic() + 30
        while len(self.swarm.members) < self.min_peers and time.monotonic() < deadline:
            time.sleep(0.02)


def test_the_start_gate_does_not_eat_the_first_exchanges_deadline() -> None:
    swarm = InMemorySwarm()
    first = Gated(swarm, "A")
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(play([first], rounds=2, timeout=0.6)))
    thread.start()
    time.sleep(1.5)  # the second peer is started by hand, later than the exchange timeout
    second = Gated(swarm, "B")
    out_b = play([second], rounds=2, timeout=0.6)
    thread.join(60)
    (r0, r1), manager = out["A"]
    assert sorted(r0.rewards) == ["A", "B"] and sorted(r1.rewards) == ["A", "B"]  # before: A played round 0 alone
    assert not manager.book.quarantined(2) and not out_b["B"][1].book.quarantined(2)


def test_fresh_ids_at_every_stage_cost_one_short_wait_per_round_in_total() -> None:
    swarm = InMemorySwarm()
    comms = [InMemoryBackend(swarm, p) for p in ("A", "B")]
    rounds, stages, timeout = 2, 3, 6.0
    for r in range(rounds):
        for s in range(stages):  # a new id at every stage
            Stranger(swarm).commit(r, s, b"never revealed")
    for results, _ in play(comms, rounds, timeout, stages).values():
        per_round = [sum(r.metrics[f"time/exchange_s{s}"] for s in range(stages)) for r in results]
        # one FRESH_SHARE wait (0.6 s) per round; before: one per stage (1.8 s), and 4.5 s a stage on the old code
        assert max(per_round) < 1.3, per_round
        assert all(sorted(r.rewards) == ["A", "B"] for r in results)


def test_a_member_that_never_posts_costs_one_short_wait_per_round_after_its_first() -> None:
    """Found by a hostile review: after its first full wait a silent member was waited for a
    tenth of the timeout at every stage's commit phase (1.8 s a round here), not once a round."""
    swarm = InMemorySwarm()
    comms = [InMemoryBackend(swarm, p) for p in ("A", "B")]
    InMemoryBackend(swarm, "silent")  # joins, never posts
    rounds, stages, timeout = 3, 3, 6.0
    for results, _ in play(comms, rounds, timeout, stages).values():
        per_round = [sum(r.metrics[f"time/exchange_s{s}"] for s in range(stages)) for r in results[1:]]
        assert max(per_round) < 1.3, per_round  # one FRESH_SHARE wait (0.6 s); before: one per stage (1.8 s)
        assert all(sorted(r.rewards) == ["A", "B"] for r in results)
