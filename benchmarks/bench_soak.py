"""Churn soak: HiveMind peers as separate `genrl-swarm swarm` processes on loopback, one of them
killed (SIGKILL or SIGTERM, alternately) and restarted with ``--resume`` on a schedule.

    .venv/bin/python benchmarks/bench_soak.py                          # 3 peers, 3 minutes, a kill every 30 s
    .venv/bin/python benchmarks/bench_soak.py --peers 4 --minutes 20 --hog 2

Peer 0 starts the swarm and is never killed; the others take turns. ``--hog N`` runs N busy
processes beside the peers (cores saturated, as generation does on a real peer). Reported per
peer: rounds played (rows), rounds it named as skipped (catch-up after a restart), rounds lost
(neither: a silent gap); then the survivors' worst stall (longest wait between two finished
rounds) across a kill and across a rejoin, peer 0's RSS growth per hour, and the peer processes
(DHT, p2pd) still running after every peer was stopped with SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import table

ROUND_ARGS = ["--recipe", "bandit", "game.max_rounds=1000000", "game.mode=train", "run.checkpoint_every=1", "game.exchange_timeout=20",
              "communication.liveness_timeout=3", "run.tensorboard=false", "run.plot=false", "run.console=false"]  # fmt: skip


@dataclass
class Peer:
    """One peer identity and its successive processes (incarnations)."""

    index: int
    work: Path
    run_dir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    peer_id: str = ""
    seen_pids: set[int] = field(default_factory=set)

    def start(self, initial: str | None, resume: bool) -> None:
        out = self.work / f"peer{self.index}.{len(self.procs)}.out"
        cmd = [
            sys.executable,
            "-m",
            "genrl_swarm.cli",
            "swarm",
            *(["--resume"] if resume else []),
            "--identity",
            str(self.work / f"peer{self.index}.key"),
        ]
        cmd += [*(["--initial-peers", initial] if initial else []), *ROUND_ARGS, f"run.dir={self.run_dir}"]
        with out.open("w") as sink:
            self.procs.append(
                subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            )

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self.procs[-1]

    def outputs(self) -> str:
        return "".join(p.read_text() for p in sorted(self.work.glob(f"peer{self.index}.*.out")))

    def maddr(self, deadline: float = 120) -> str:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            newest = self.work / f"peer{self.index}.{len(self.procs) - 1}.out"  # this incarnation's
            found = re.findall(r"others join with: --initial-peers (\S+)", newest.read_text())
            if found:
                self.peer_id = found[-1].rsplit("/", 1)[1]
                return str(found[-1])
            time.sleep(0.2)
        raise SystemExit(f"peer {self.index} did not come up:\n{self.outputs()[-2000:]}")

    def note_children(self) -> None:
        """Remember every process under this peer (its DHT process and p2pd), to check they end."""
        todo = [self.proc.pid]
        while todo:
            pid = todo.pop()
            self.seen_pids.add(pid)
            todo += [int(c) for c in _children(pid)]

    def round_times(self) -> list[float]:
        path = self.run_dir / self.peer_id / "events.jsonl"
        events = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
        return [e["t"] for e in events if e.get("kind") == "round"]

    def rows(self) -> set[int]:
        path = self.run_dir / self.peer_id / "metrics.jsonl"
        return {json.loads(line)["round"] for line in path.read_text().splitlines() if line.endswith("}")} if path.is_file() else set()

    def skipped(self) -> set[int]:
        named = re.findall(r"skipping rounds (\d+)-(\d+)", self.outputs())
        return {r for first, last in named for r in range(int(first), int(last) + 1)}


def _children(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def worst_gap_across(times: list[float], moments: list[float]) -> float:
    """The longest wait between two finished rounds that spans one of ``moments``."""
    gaps = [b - a for a, b in zip(times, times[1:]) if any(a <= m <= b for m in moments)]
    return max(gaps, default=0.0)


def hog(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peers", type=int, default=3)
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--kill-every", type=float, default=30.0, help="seconds between kills")
    p.add_argument("--down", type=float, default=3.0, help="seconds a killed peer stays down")
    p.add_argument("--hog", type=int, default=0, help="busy processes beside the peers")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_soak."))
    peers = [Peer(i, work, work / "run") for i in range(a.peers)]
    hogs = hog(a.hog)
    kills: list[float] = []
    rejoins: list[float] = []
    try:
        peers[0].start(None, resume=False)
        first = peers[0].maddr()
        for peer in peers[1:]:
            peer.start(first, resume=False)
            peer.maddr()
        time.sleep(10)  # warm-up before the first RSS sample
        rss = [(time.monotonic(), rss_kib(peers[0].proc.pid))]
        end, turn, how = time.monotonic() + a.minutes * 60, 0, [signal.SIGKILL, signal.SIGTERM]
        while time.monotonic() < end:
            time.sleep(a.kill_every)
            victim = peers[1 + turn % (a.peers - 1)]
            victim.note_children()
            kills.append(time.time())
            victim.proc.send_signal(how[turn % 2])
            victim.proc.wait(timeout=120)
            time.sleep(a.down)
            victim.start(first, resume=True)
            victim.maddr()
            rejoins.append(time.time())
            turn += 1
        rss.append((time.monotonic(), rss_kib(peers[0].proc.pid)))
    finally:
        for peer in peers:
            if peer.procs and peer.proc.poll() is None:
                peer.note_children()
                peer.proc.send_signal(signal.SIGTERM)
        codes = [peer.proc.wait(timeout=120) if peer.procs else None for peer in peers]
        for h in hogs:
            h.kill()
    time.sleep(5)  # helpers die with their peer: soon, not at once
    left = sorted(pid for peer in peers for pid in peer.seen_pids if _running(pid))
    rows = []
    for peer in peers:
        played, skipped = peer.rows(), peer.skipped()
        lost = set(range(min(played), max(played) + 1)) - played - skipped if played else set()
        rows.append([peer.index, peer.peer_id[-8:], len(peer.procs), len(played), len(skipped), len(lost), codes[peer.index]])
    print(
        f"{a.peers} peers, {a.minutes:g} min, a kill every {a.kill_every:g} s (SIGKILL and SIGTERM in turn), {a.hog} hog process(es); {len(kills)} kills"
    )
    print(table(["peer", "id", "processes", "rounds played", "skipped (named)", "lost (silent)", "exit on SIGTERM"], rows))
    survivor = peers[0].round_times()
    (t0, r0), (t1, r1) = rss
    growth = (r1 - r0) / r0 * 100 / ((t1 - t0) / 3600) if r0 else float("nan")
    print(f"peer 0: worst stall across a kill {worst_gap_across(survivor, kills):.1f} s, across a rejoin {worst_gap_across(survivor, rejoins):.1f} s; "
          f"RSS {r0 / 1024:.0f} -> {r1 / 1024:.0f} MiB ({growth:+.1f}%/h); processes left running: {left or 'none'}; outputs in {work}")  # fmt: skip


if __name__ == "__main__":
    main()
