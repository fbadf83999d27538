"""Real p2pd DHT peers in separate processes on 127.0.0.1: a 3-peer game, a peer killed with
SIGKILL and restarted with its identity, and the actionable start-up errors."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from genrl_swarm.core import Task
from genrl_swarm.run.metrics import read_metrics

from conftest import Echo, echo


def body(text: str) -> Echo:
    return echo(Task.create("q").input(0), text)

pytest.importorskip("hivemind")
ROOT = Path(__file__).parents[1]
QUIET = ["run.tensorboard=false", "run.plot=false", "run.console=false"]


class Peer:
    def __init__(self, tmp: Path, name: str, args: list[str], initial: str | None = None, identity: str | None = None) -> None:
        self.out = tmp / f"{name}.out"
        key = tmp / f"{identity or name}.key"
        cmd = [sys.executable, "-m", "genrl_swarm.cli", "swarm", "--identity", str(key), *args]
        if initial:
            cmd[4:4] = ["--initial-peers", initial]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
        with self.out.open("w") as sink:
            self.proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, text=True, env=env)

    def text(self) -> str:
        return self.out.read_text() if self.out.exists() else ""

    def maddr(self, deadline: float = 60) -> str:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            for line in self.text().splitlines():
                if "others join with: --initial-peers " in line:
                    return line.rsplit(" ", 1)[1]
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"peer did not come up:\n{self.text()[-2000:]}")

    def peer_id(self) -> str:
        return self.maddr().rsplit("/", 1)[1]

    def wait(self, timeout: float = 240) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def metrics(run: Path, peer: str) -> list[dict]:
    path = run / peer / "metrics.jsonl"
    return read_metrics(path) if path.exists() else []


def test_three_peers_play_three_rounds_and_see_each_other(tmp_path: Path) -> None:
    args = ["--recipe", "bandit", f"run.dir={tmp_path / 'run'}", "game.max_rounds=3", "game.exchange_timeout=60",
            "communication.min_peers=3", *QUIET]  # fmt: skip
    first = Peer(tmp_path, "a", args)
    others = [Peer(tmp_path, name, args, initial=first.maddr()) for name in ("b", "c")]
    peers = [first, *others]
    assert all(p.wait() == 0 for p in peers), [p.text()[-1500:] for p in peers]
    ids = sorted(p.peer_id() for p in peers)
    for pid in ids:
        rows = metrics(tmp_path / "run", pid)
        assert [r["round"] for r in rows] == [0, 1, 2]
        for row in rows:
            assert row["swarm/peers_s0"] == row["swarm/peers_s1"] == 3
            assert sorted(k.rsplit("/", 1)[1] for k in row if k.startswith("reward/peer/")) == ids


def test_killed_peer_others_go_on_and_it_rejoins_with_its_identity(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["--recipe", "bandit", f"run.dir={run}", "game.max_rounds=14", "game.exchange_timeout=3",
            "communication.min_peers=3", "policy._target_=dist_helpers.SlowPolicy", "+policy.delay=0.3", *QUIET]  # fmt: skip
    a = Peer(tmp_path, "a", args)
    b, c = Peer(tmp_path, "b", args, initial=a.maddr()), Peer(tmp_path, "c", args, initial=a.maddr())
    c_id = c.peer_id()
    deadline = time.monotonic() + 120
    while len(metrics(run, c_id)) < 2:
        assert time.monotonic() < deadline, c.text()[-2000:]
        time.sleep(0.1)
    c.proc.send_signal(signal.SIGKILL)  # mid-round: it is generating or exchanging round 2
    c.proc.wait()
    killed_after = len(metrics(run, c_id))
    time.sleep(8)  # the others play on at their deadlines
    again = Peer(tmp_path, "c2", args, initial=a.maddr(), identity="c")
    assert again.peer_id() == c_id  # same identity file, same peer id
    assert all(p.wait() == 0 for p in (a, b, again)), [p.text()[-1500:] for p in (a, b, again)]
    a_rows = {r["round"]: r for r in metrics(run, a.peer_id())}
    assert sorted(a_rows) == list(range(14))  # the survivors finished every round
    assert any(r["swarm/peers_s0"] == 2 for r in a_rows.values())  # ... some of them without the dead peer
    c_rounds = [r["round"] for r in metrics(run, c_id)]
    rejoined = c_rounds[killed_after:]
    assert rejoined and rejoined[0] > c_rounds[killed_after - 1] + 1  # it jumped to the swarm's round
    assert rejoined[-1] == 13


def test_unreachable_initial_peer_fails_fast_with_what_was_tried(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bogus = f"/ip4/127.0.0.1/tcp/{port}/p2p/QmaCpDMGvV2BGHeYERUEnRQAwe3N8SzbUtfsmvsqQLuvuJ"
    start = time.monotonic()
    peer = Peer(tmp_path, "x", ["--recipe", "bandit", f"run.dir={tmp_path}", *QUIET], initial=bogus)
    assert peer.wait(timeout=120) == 3
    assert time.monotonic() - start < 60
    assert "no initial peer answered (tried " + bogus in peer.text()


def test_identity_in_use_and_port_in_use(tmp_path: Path) -> None:
    args = ["--recipe", "bandit", f"run.dir={tmp_path}", "game.max_rounds=100", "game.exchange_timeout=60",
            "communication.min_peers=5", *QUIET]  # fmt: skip
    holder = Peer(tmp_path, "a", args)
    holder.maddr()
    try:
        twin = Peer(tmp_path, "twin", args, identity="a")
        assert twin.wait(timeout=120) == 3
        assert "is already used by a running peer" in twin.text()
        with socket.socket() as taken:  # libp2p shares ports with other libp2p hosts (SO_REUSEPORT), not with this
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            clash = Peer(tmp_path, "b", [*args, f"communication.host_maddrs=[/ip4/127.0.0.1/tcp/{port}]"])
            assert clash.wait(timeout=120) == 3
        assert f"port in use: cannot listen on /ip4/127.0.0.1/tcp/{port}" in clash.text(), clash.text()[-1500:]
    finally:
        holder.proc.kill()
        holder.proc.wait()


def test_exchange_never_crashes_on_odd_records(tmp_path: Path) -> None:
    from hivemind.utils import get_dht_time

    from genrl_swarm.comm.hivemind_dht import HivemindBackend

    a = HivemindBackend(min_peers=3, swarm="odd")
    b = HivemindBackend(initial_peers=a.visible_maddrs(), min_peers=3, swarm="odd")
    try:
        b.dht.store("odd/r0/s0", 12345, get_dht_time() + 60, subkey="not-bytes")  # a value of the wrong type
        b.dht.store("odd/r0/s0", b"\x00garbage", get_dht_time() + 60, subkey="garbage")
        got = a.exchange(0, 0, [body("x")], timeout=2.0, body_type=Echo)
        assert sorted(got.dropped) == ["garbage", "not-bytes"]
        assert list(got.received) == [a.peer_id]
        assert a.exchange(5, 1, [body("x")], timeout=0.5, body_type=Echo).received.keys() == {a.peer_id}
        with pytest.raises(ValueError, match="over the limit"):
            a.exchange(0, 1, [body("x" * 4_000_000)], timeout=0.5, body_type=Echo)
        assert a.swarm_round() == 5
    finally:
        a.close()
        b.close()


def test_payloads_larger_than_one_chunk_arrive_whole() -> None:
    """hivemind's DHT process died on store requests of 60-200 KB; payloads now travel in
    3 KB chunks and must come out byte-identical on the other side."""
    from genrl_swarm.comm.hivemind_dht import CHUNK, HivemindBackend

    a = HivemindBackend(min_peers=2, swarm="big")
    b = HivemindBackend(initial_peers=a.visible_maddrs(), min_peers=2, swarm="big")
    try:
        prompt = "".join(chr(0x41 + i % 50) for i in range(150_000))  # 50 chunks, not a repeated byte
        assert len(prompt) > 40 * CHUNK
        b.dht.store("big/r0/s0", b"\x00", 0, subkey=f"{b.peer_id}#0/2")  # a stale half, already expired
        mine = [body(prompt)]
        import threading

        sent = threading.Thread(target=lambda: b.exchange(0, 0, mine, timeout=30, body_type=Echo))
        sent.start()
        got = a.exchange(0, 0, [body("y")], timeout=30, body_type=Echo)
        sent.join(timeout=60)
        assert got.dropped == {}
        assert got.received[b.peer_id][0].outputs == (prompt,)
    finally:
        a.close()
        b.close()
