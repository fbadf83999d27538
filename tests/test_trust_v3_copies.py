"""Identical work is de-duplicated, never a drop (issue 28, point 7): two converged honest peers
sampling deterministically send byte-identical groups; before, each dropped the other's as a copy
(2 drops a round from round 9 of ``make demo``), reported them, and counted them against it."""

from __future__ import annotations

from genrl_swarm.core import GameState, Task, TokenRollout, TokenSample
from genrl_swarm.core.admission import admit
from genrl_swarm.core.bodies import MIN_COPY_UNITS
from genrl_swarm.core.trust import SenderBook, TrustConfig


def converged(inp: object) -> TokenRollout:
    """The group two peers greedy-sampling the same weights both produce."""
    sample = TokenSample(tuple(range(MIN_COPY_UNITS)), (-0.01,) * MIN_COPY_UNITS, "stop")
    return TokenRollout(inp.task_id, inp.digest, (1, 2), (sample, sample), 0, "tok")  # type: ignore[attr-defined]


def test_converged_honest_peers_are_deduplicated_not_dropped() -> None:
    task = Task.create("q", answer="1")
    state = GameState(9, "a")
    state.set_tasks([task])
    inp = task.input(0)
    refused = admit(state, 0, [inp], {"b": [converged(inp)], "a": [converged(inp)], "c": [converged(inp)]})
    assert refused == [] and state.drops_by_peer() == {}  # before: a and c dropped as copies of b
    assert [r.peer_id for r in state.rollouts] == ["b"]  # trained on once, credited once
    assert [d.peer_id for d in state.copies] == ["a", "c"]
    book = SenderBook(TrustConfig(max_soft_drops=0), "a")
    assert book.close_round(9, [*state.drops, *state.copies]) == {} and dict(book.drops) == {}
