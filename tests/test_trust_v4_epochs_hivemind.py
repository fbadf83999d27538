"""A HiveMind swarm's run (epoch) on real p2pd peers (issue 42, point 1).

No launcher draws a HiveMind swarm's epoch: its first peer does (or brings its run directory's
on ``--resume``), and a peer that joins plays the epoch of the peers it joins through, whatever
its own run directory says. An identity file keeps what it signed beside it, per epoch, so the
same file used in a new run (a cleared ``runs/``, another directory) plays from round 0 there and
still never signs twice in the old one.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from genrl_swarm.comm.epoch import Epoch, save_epoch, saved_epoch
from genrl_swarm.comm.hivemind.dht import HivemindBackend
from genrl_swarm.comm.signed_log import SignedLog
from genrl_swarm.core.interfaces import ExchangeResult

from helpers import Echo

pytestmark = pytest.mark.slow  # p2pd daemons
SWARM = "epochs"


def pair(tmp_path: Path, run: str, resume: bool) -> tuple[HivemindBackend, HivemindBackend]:
    """a starts the swarm, b joins through it; each with its identity file and run directory."""
    pytest.importorskip("hivemind")  # the backend starts p2pd through it (the modules import it lazily)
    a = HivemindBackend(swarm=SWARM, identity_path=str(tmp_path / "a.key"), liveness_timeout=1.5)
    a.bind_run(tmp_path / run / "a", resume)
    b = HivemindBackend(initial_peers=a.visible_maddrs(), swarm=SWARM, identity_path=str(tmp_path / "b.key"), liveness_timeout=1.5)
    b.bind_run(tmp_path / run / "b", resume)
    end = time.monotonic() + 20
    while not all(len(p.membership.live()) == 2 for p in (a, b)):
        assert time.monotonic() < end, "the two did not see each other"
        time.sleep(0.05)
    return a, b


def exchange(peers: tuple[HivemindBackend, ...], round: int) -> dict[str, ExchangeResult]:
    out: dict[str, ExchangeResult] = {}
    threads = [threading.Thread(target=lambda p=p: out.__setitem__(p.peer_id, p.exchange(round, 0, [], 10.0, Echo))) for p in peers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_a_joiner_plays_the_swarms_run_and_a_new_run_owes_nothing_to_an_old_one(tmp_path: Path) -> None:
    kept, stale = Epoch.new(), Epoch.new()
    save_epoch(tmp_path / "first" / "a", kept)  # a resumes the swarm's run
    save_epoch(tmp_path / "first" / "b", stale)  # b's directory remembers another
    a, b = pair(tmp_path, "first", resume=True)
    try:
        got = exchange((a, b), 0)
        assert all(set(r.received) == {a.peer_id, b.peer_id} for r in got.values())
        assert a.epoch == b.epoch == kept and saved_epoch(tmp_path / "first" / "b") == kept
        assert SignedLog(tmp_path / "b.key.signed").last(kept) == (0, 0)  # beside the identity, not the run directory
    finally:
        for p in (a, b):
            p.close()
    a, b = pair(tmp_path, "second", resume=False)  # the same identity files, a new run (another directory)
    try:
        got = exchange((a, b), 0)
        assert a.epoch == b.epoch != kept
        assert all(set(r.received) == {a.peer_id, b.peer_id} for r in got.values())  # nothing sat out: no slot of this run was signed
        log = SignedLog(tmp_path / "b.key.signed")
        assert log.last(a.epoch) == (0, 0) and log.last(kept) == (0, 0)
    finally:
        for p in (a, b):
            p.close()
