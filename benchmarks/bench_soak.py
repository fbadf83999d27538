"""Churn soak: HiveMind peers as separate `genrl-swarm swarm` processes on loopback, one of them
killed with SIGKILL (kill -9) and restarted with ``--resume`` every cycle, with every core
saturated by a CPU hog for half the cycles.

    .venv/bin/python benchmarks/bench_soak.py                          # 3 peers, 12 cycles, a kill every 25 s
    .venv/bin/python benchmarks/bench_soak.py --cycles 20 --load 6     # a 6 s model load at every (re)start

Peer 0 starts the swarm and is never killed; the others take turns. The hog (one busy process per
core) runs in the second half of the cycles, so each number below has a loaded and an idle side.
``--load S`` makes every peer's policy take S seconds to build after its membership is announced
(``tests/helpers/loading.py``), as a model load does; 0 is the bandit's own start-up.

Reported:

* per peer: rounds played, rounds it named as skipped (catch-up after a restart), rounds lost
  (neither: a silent gap), its exit status on the final SIGTERM;
* per cycle, separately: the survivors' worst stall (longest wait between two finished rounds) across
  the kill (from the kill to the liveness timeout and a little more), and across the rejoin (from the
  restarted process announcing its membership to its first round and 2 s more); the goal is <= 5 s
  for both;
* per process of every peer (the peer, its DHT process, p2pd; each incarnation apart): RSS and open
  file descriptors sampled every few seconds, with a least-squares slope (per hour) for processes
  that lived long enough to fit one; the processes still running after every peer was stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import table

ROOT = Path(__file__).parents[1]
ROUND_ARGS = ["--recipe", "bandit", "game.max_rounds=1000000", "game.mode=train", "run.checkpoint_every=1", "game.exchange_timeout=20",
              "communication.liveness_timeout=3", "run.tensorboard=false", "run.plot=false", "run.console=false",
              "communication.startup_timeout=120"]  # fmt: skip
#: Seconds after a kill still counted as its stall: the liveness timeout (3 s) and some.
KILL_WINDOW = 6.0
#: A process's RSS and fds are fitted a slope only after its warm-up (imports, first rounds,
#: first checkpoint), over this many seconds of samples or more.
WARMUP_SECONDS, MIN_FIT_SECONDS = 30.0, 60.0


@dataclass
class Peer:
    """One peer identity and its successive processes (incarnations)."""

    index: int
    work: Path
    run_dir: Path
    load: float
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
        if self.load > 0:
            cmd += ["policy._target_=helpers.loading.LoadingPolicy", f"+policy.load_seconds={self.load}"]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
        with out.open("w") as sink:
            self.procs.append(subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, env=env))

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self.procs[-1]

    def outputs(self) -> str:
        return "".join(p.read_text() for p in sorted(self.work.glob(f"peer{self.index}.*.out")))

    def maddr(self, deadline: float = 180) -> str:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            newest = self.work / f"peer{self.index}.{len(self.procs) - 1}.out"  # this incarnation's
            found = re.findall(r"others join with: --initial-peers (\S+)", newest.read_text())
            if found:
                self.peer_id = found[-1].rsplit("/", 1)[1]
                return str(found[-1])
            time.sleep(0.2)
        raise SystemExit(f"peer {self.index} did not come up:\n{self.outputs()[-2000:]}")

    def processes(self) -> dict[int, str]:
        """pid -> role (peer, dht, p2pd) of this incarnation's process tree."""
        found, todo = {}, [self.proc.pid] if self.procs and self.proc.poll() is None else []
        while todo:
            pid = todo.pop()
            found[pid] = _role(pid, pid == self.proc.pid)
            todo += [int(c) for c in _children(pid)]
        self.seen_pids |= found.keys()
        return found

    def round_times(self) -> list[float]:
        path = self.run_dir / self.peer_id / "events.jsonl"
        events = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")] if path.is_file() else []
        return [e["t"] for e in events if e.get("kind") == "round"]

    def rows(self) -> set[int]:
        path = self.run_dir / self.peer_id / "metrics.jsonl"
        return {json.loads(line)["round"] for line in path.read_text().splitlines() if line.endswith("}")} if path.is_file() else set()

    def skipped(self) -> set[int]:
        named = re.findall(r"skipping rounds (\d+)-(\d+)", self.outputs())
        return {r for first, last in named for r in range(int(first), int(last) + 1)}


@dataclass
class Cycle:
    """One kill -9 and rejoin: whom, when, with or without the hog."""

    victim: int
    hog: bool
    killed: float
    restarted: float = 0.0  # its new process announced its membership (survivors may wait for it from here)
    back: float = 0.0  # the victim's first round after the restart


@dataclass(frozen=True)
class Sample:
    t: float
    peer: int
    pid: int
    role: str
    rss_kib: int
    fds: int


def _children(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []


def _role(pid: int, top: bool) -> str:
    """What a process of a peer's tree is: the peer, its DHT process (Python), or a binary by name
    (p2pd, torch_shm_manager)."""
    if top:
        return "peer"
    try:
        program = Path(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()).name
    except (OSError, UnicodeDecodeError):
        return "?"
    return "dht" if program.startswith("python") else program


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


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def worst_gap(times: list[float], start: float, end: float) -> float:
    """The longest wait between two finished rounds that overlaps [start, end]."""
    return max((b - a for a, b in zip(times, times[1:]) if b >= start and a <= end), default=0.0)


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per hour."""
    ts, vs = [t for t, _ in points], [v for _, v in points]
    mt, mv = statistics.fmean(ts), statistics.fmean(vs)
    var = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (v - mv) for t, v in points) / var * 3600 if var else float("nan")


def hog() -> list[subprocess.Popen[bytes]]:
    """One busy process per core (both cores of a 2-core machine saturated)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(len(os.sched_getaffinity(0)))]


def sampler(peers: list[Peer], samples: list[Sample], stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        now = time.monotonic()
        for peer in peers:
            for pid, role in peer.processes().items():
                try:
                    if _running(pid):  # not a zombie waiting to be reaped: its RSS reads 0
                        samples.append(Sample(now, peer.index, pid, role, rss_kib(pid), fds(pid)))
                except OSError:  # it ended between the listing and the reading
                    continue


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peers", type=int, default=3)
    p.add_argument("--cycles", type=int, default=12, help="kill -9 and rejoin cycles (the hog runs in the second half)")
    p.add_argument("--kill-every", type=float, default=25.0, help="seconds between kills")
    p.add_argument("--down", type=float, default=3.0, help="seconds a killed peer stays down")
    p.add_argument("--load", type=float, default=0.0, help="seconds each peer's policy takes to build (a model load)")
    p.add_argument("--sample-every", type=float, default=5.0, help="seconds between RSS/fd samples")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_soak."))
    peers = [Peer(i, work, work / "run", a.load) for i in range(a.peers)]
    cycles: list[Cycle] = []
    samples: list[Sample] = []
    stop = threading.Event()
    hogs: list[subprocess.Popen[bytes]] = []
    loads = [os.getloadavg()[0]]
    began = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    try:
        peers[0].start(None, resume=False)
        first = peers[0].maddr()
        for peer in peers[1:]:
            peer.start(first, resume=False)
            peer.maddr()
        watcher = threading.Thread(target=sampler, args=(peers, samples, stop, a.sample_every), daemon=True)
        watcher.start()
        for turn in range(a.cycles):
            if turn == a.cycles // 2:
                hogs = hog()
            time.sleep(a.kill_every)
            loads.append(os.getloadavg()[0])
            victim = peers[1 + turn % (a.peers - 1)]
            victim.processes()
            cycle = Cycle(victim.index, bool(hogs), time.time())
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait(timeout=120)
            played = len(victim.round_times())
            time.sleep(a.down)
            victim.start(first, resume=True)
            victim.maddr()
            cycle.restarted = time.time()
            end = time.monotonic() + 180
            while len(victim.round_times()) <= played and time.monotonic() < end:
                time.sleep(0.2)
            cycle.back = victim.round_times()[played] if len(victim.round_times()) > played else float("nan")
            cycles.append(cycle)
        time.sleep(10)  # the last rejoin's stall has ended before it is measured
    finally:
        stop.set()
        for peer in peers:
            if peer.procs and peer.proc.poll() is None:
                peer.processes()
                peer.proc.send_signal(signal.SIGTERM)
        codes = [peer.proc.wait(timeout=120) if peer.procs else None for peer in peers]
        for h in hogs:
            h.kill()
    time.sleep(5)  # helpers die with their peer: soon, not at once
    left = sorted(pid for peer in peers for pid in peer.seen_pids if _running(pid))
    report(a, peers, cycles, samples, codes, left, began, loads, work)


def report(
    a: argparse.Namespace, peers: list[Peer], cycles: list[Cycle], samples: list[Sample], codes: list[int | None], left: list[int], began: str,
    loads: list[float], work: Path,
) -> None:  # fmt: skip
    rows = []
    for peer in peers:
        played, skipped = peer.rows(), peer.skipped()
        lost = set(range(min(played), max(played) + 1)) - played - skipped if played else set()
        rows.append([peer.index, peer.peer_id[-8:], len(peer.procs), len(played), len(skipped), len(lost), codes[peer.index]])
    print(f"{began}: {a.peers} peers, {len(cycles)} kill -9 + --resume cycles ({a.kill_every:g} s apart, {a.down:g} s down), "
          f"hog ({len(os.sched_getaffinity(0))} busy processes) in the last {len(cycles) - len(cycles) // 2}, a {a.load:g} s model load at every start; "
          f"1-min load average {min(loads):.1f}-{max(loads):.1f}")  # fmt: skip
    print(table(["peer", "id", "processes", "rounds played", "skipped (named)", "lost (silent)", "exit on SIGTERM"], rows))
    times = {peer.index: peer.round_times() for peer in peers}
    stalls = []
    for n, c in enumerate(cycles):
        survivors = [i for i in times if i != c.victim]
        kill = max(worst_gap(times[i], c.killed, c.killed + KILL_WINDOW) for i in survivors)
        rejoin = max(worst_gap(times[i], c.restarted, c.back + 2.0) for i in survivors)
        stalls.append([n, c.victim, "on" if c.hog else "off", kill, rejoin, c.back - c.restarted])
    print(
        table(
            ["cycle", "victim", "hog", "survivors' worst stall across the kill (s)", "... across the rejoin (s)", "membership to first round (s)"],
            stalls,
        )
    )
    for hog_on in (False, True):
        side = [s for s in stalls if (s[2] == "on") == hog_on]
        if side:
            print(f"hog {'on ' if hog_on else 'off'}: worst kill stall {max(s[3] for s in side):.2f} s, worst rejoin stall {max(s[4] for s in side):.2f} s "
                  f"(median {statistics.median(s[3] for s in side):.2f} / {statistics.median(s[4] for s in side):.2f} s) over {len(side)} cycles")  # fmt: skip
    series: dict[tuple[int, int, str], list[Sample]] = {}
    for s in samples:
        series.setdefault((s.peer, s.pid, s.role), []).append(s)
    fitted, short = [], dict[tuple[int, str], list[Sample]]()
    for (peer, pid, role), got in sorted(series.items()):
        warm = [s for s in got if s.t - got[0].t >= WARMUP_SECONDS]
        if len(warm) < 3 or warm[-1].t - warm[0].t < MIN_FIT_SECONDS:  # a restarted incarnation: too short to fit
            short.setdefault((peer, role), []).append(got[-1])
            continue
        rss, fd = slope_per_hour([(s.t, s.rss_kib / 1024) for s in warm]), slope_per_hour([(s.t, s.fds) for s in warm])
        fitted.append([peer, pid, role, len(warm), round(warm[-1].t - warm[0].t), f"{warm[0].rss_kib / 1024:.0f} -> {warm[-1].rss_kib / 1024:.0f}",
                       f"{rss:+.1f}", f"{warm[0].fds} -> {warm[-1].fds}", f"{fd:+.1f}"])  # fmt: skip
    print(f"processes that lived past their {WARMUP_SECONDS:g} s warm-up by {MIN_FIT_SECONDS:g} s or more (slopes fitted after the warm-up):")
    print(table(["peer", "pid", "process", "samples", "seconds", "RSS MiB", "RSS slope MiB/h", "fds", "fd slope /h"], fitted))
    rows = [[peer, role, len(last), f"{min(s.rss_kib for s in last) / 1024:.0f}-{max(s.rss_kib for s in last) / 1024:.0f}",
             f"{min(s.fds for s in last)}-{max(s.fds for s in last)}"] for (peer, role), last in sorted(short.items())]  # fmt: skip
    print("shorter-lived processes (restarted incarnations), at their last sample:")
    print(table(["peer", "process", "incarnations", "RSS MiB", "fds"], rows))
    print(f"processes left running: {left or 'none'}; outputs in {work}")


if __name__ == "__main__":
    main()
