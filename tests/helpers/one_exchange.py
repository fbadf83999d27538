"""One stage-0 exchange of an Echo body at every peer at once, once all see each other live.

Why: the HiveMind fetch-by-digest tests (views, verified work) start from the same round; one
place for how they wait for membership and run the peers side by side.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from genrl_swarm.comm.base import ByteBackend
from genrl_swarm.core import ExchangeResult, Task

from helpers import Echo, echo


def exchange_all(peers: Sequence[ByteBackend], timeout: float = 20.0) -> dict[str, ExchangeResult]:
    """Wait (up to 10 s) until every peer sees all of them live, then exchange round 0, stage 0."""
    for _ in range(100):
        if all(len(p.membership.live()) == len(peers) for p in peers):  # type: ignore[attr-defined]
            break
        threading.Event().wait(0.1)
    results: dict[str, ExchangeResult] = {}

    def one(peer: ByteBackend) -> None:
        results[peer.peer_id] = peer.exchange(0, 0, [echo(Task.create("q").input(0), peer.peer_id[-6:])], timeout, Echo)

    threads = [threading.Thread(target=one, args=(p,)) for p in peers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results
