"""Verified work on real p2pd peers (issue 45.3): the model a commitment names is pulled by its
digest over HiveMind's held protocol, from the sender or from a peer that checked it, and a
passed-on fault's payload and model are pulled from the accuser when the accused is gone.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

pytest.importorskip("hivemind")
import hivemind  # noqa: F401 - the backend starts p2pd through it

from genrl_swarm.comm.held import HeldPayloads
from genrl_swarm.comm.hivemind.dht import HivemindBackend
from genrl_swarm.core.interfaces import Fault

from helpers import Echo
from helpers.one_exchange import exchange_all


def test_a_committed_model_and_a_faults_work_are_pulled_by_digest_over_hivemind() -> None:
    blob = bytes(range(256)) * 6000  # 1.5 MB: an adapter's size, more than one read
    first = HivemindBackend(swarm="verified", liveness_timeout=3.0)
    peers = [first, *(HivemindBackend(initial_peers=first.visible_maddrs(), swarm="verified", liveness_timeout=3.0) for _ in range(2))]
    try:
        a, b, c = peers
        a.commit_model(("test:model-a", blob))
        results = exchange_all(peers)
        assert all(set(r.received) == {a.peer_id, b.peer_id, c.peer_id} for r in results.values())
        claim = results[b.peer_id].models[a.peer_id]
        assert (claim.name, claim.blob, claim.size) == ("test:model-a", hashlib.sha256(blob).hexdigest(), len(blob))
        assert set(results[b.peer_id].models) == {a.peer_id}  # b and c committed none
        assert b.fetch_model(0, a.peer_id, claim, 15.0) == blob  # from the sender, over a stream
        b.accuse(0, 0, a.peer_id, 0, blob)  # b now holds the model for whoever re-checks
        a.held, c.held = HeldPayloads(), HeldPayloads()  # the accused serves nothing; c holds nothing
        fault = Fault(b.peer_id, a.peer_id, 0, 0, 0, claim, a.epoch.value, results[c.peer_id].digests[a.peer_id], results[c.peer_id].sizes[a.peer_id])
        work: Any = c.faulted_work(fault, Echo, 15.0)
        assert not isinstance(work, str), work
        assert work == (results[b.peer_id].received[a.peer_id][0], blob)  # both from the accuser
        b.held = HeldPayloads()
        c.held = HeldPayloads()
        assert isinstance(c.faulted_work(fault, Echo, 3.0), str)  # nobody holds them any more: a reason, in time
    finally:
        for p in peers:
            p.close()
