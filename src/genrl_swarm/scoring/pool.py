"""The peer's side of the scorer sandbox: a zygote and a few warm workers, one sender each.

``call`` runs ``module:function(*args)`` in a worker bound to the current sender (``core.meter``)
and returns its value, charging that sender the worker's CPU time as the kernel counts it
(read from /proc by this process, not reported by the worker). While it waits, this process
watches the worker's CPU clock and the wall clock and kills the worker past either limit: the
sender's remaining budget or ``cpu_seconds``, whichever is lower, and ``wall_seconds``. A call
to a warm worker costs one pipe round trip; a sender without a worker gets a fresh fork from the
zygote (milliseconds), evicting the least recently used idle worker.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any

import msgspec

from genrl_swarm.core import meter
from genrl_swarm.sandbox.frames import FrameError, pack
from genrl_swarm.sandbox.kernel import run_and_wait
from genrl_swarm.sandbox.seccomp import not_dumpable
from genrl_swarm.scoring.jobs import WORKER_CPU_SECONDS, ScoreReply, ScorerFailed, ScorerLimits

log = logging.getLogger(__name__)
START_TIMEOUT = 120.0  # a loaded machine can take a while to import the scorers
_POLL = 0.02  # seconds between looks at a running worker's CPU clock
_MAX_REPLY = 1 << 16


class Worker:
    """One forked sandboxed process serving one sender."""

    def __init__(self, pid: int, sock: socket.socket, sender: str) -> None:
        self.pid, self.sock, self.sender = pid, sock, sender

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self.sock.close()

    def call(self, target: str, args: tuple[Any, ...], cap: float, wall: float) -> tuple[ScoreReply | None, float, str]:
        """(reply or None, seconds to charge, why it failed). Charged: wall time minus the time
        the worker waited for a CPU (``run_and_wait``): computing, sleeping, blocking or stopping
        itself all hold this peer; waiting on a loaded machine is not the sender's doing. Past
        ``cap`` charged seconds, or ``wall`` seconds in all, the worker is killed."""
        nonce = secrets.randbits(63)
        times = run_and_wait(self.pid)
        if times is None:
            return None, 0.0, "the scorer's process was gone"
        start, waited0, charged = time.monotonic(), times[1], 0.0
        try:
            self.sock.sendall(pack(pickle.dumps((nonce, target, args))))
        except OSError as e:
            return None, 0.0, f"the scorer's process was gone ({type(e).__name__})"
        while True:
            ready, _, _ = select.select([self.sock], [], [], _POLL)
            times = run_and_wait(self.pid) or times  # None once it died: keep the last count
            charged = max(charged, time.monotonic() - start - (times[1] - waited0))
            if ready:
                return self._reply(nonce, charged, start + wall)
            if charged > cap:
                return None, charged, f"the scorer took over {cap:.2f} s (CPU, sleep or blocked)"
            if time.monotonic() - start > wall:
                return None, charged, f"the scorer did not finish within {wall:g} s"

    def _reply(self, nonce: int, charged: float, deadline: float) -> tuple[ScoreReply | None, float, str]:
        """The one frame the job asked for: the job's nonce, and nothing after it (a worker that
        queues frames of its own is killed, its reply refused)."""
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            size = int.from_bytes(_recv(self.sock, 4), "big")
            if size > _MAX_REPLY:
                raise FrameError(f"a reply of {size} bytes")
            reply = msgspec.msgpack.decode(_recv(self.sock, size), type=ScoreReply)
            self.sock.setblocking(False)
            extra = self.sock.recv(1, socket.MSG_PEEK)
            if extra or reply.nonce != nonce:
                raise FrameError("a reply for another job, or frames it was not asked for")
        except BlockingIOError:
            return reply, charged, ""  # nothing after the reply: as it should be
        except (OSError, EOFError, FrameError, msgspec.DecodeError) as e:
            return None, charged, f"the scorer's process died or broke the protocol ({type(e).__name__}: {e})"
        finally:
            self.sock.setblocking(True)
        return None, charged, "the scorer's process closed its socket after replying"


def _recv(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


class ScorerPool:
    """Sandboxed workers for code we did not write; ``call`` is thread-safe."""

    def __init__(self, limits: ScorerLimits, modules: tuple[str, ...] = ()) -> None:
        self.limits, self.modules = limits, modules
        self._idle: OrderedDict[int, Worker] = OrderedDict()  # pid -> idle worker, least recent first
        self._busy = 0
        self._cond = threading.Condition()
        self._zygote: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._scratch = Path(tempfile.mkdtemp(prefix="genrl-scorers-"))
        weakref.finalize(self, shutil.rmtree, self._scratch, True)  # also when close() is never called
        self.isolated = False
        self.forks = self.kills = 0

    def call(self, target: str, *args: Any) -> float:
        """``target(*args)`` in the sandbox, on the current sender's behalf; ScorerFailed if it
        gives no score in its limits (CPU charged to the sender either way)."""
        cap = min(self.limits.cpu_seconds, meter.remaining())
        worker = self._checkout(meter.sender())
        reply, used, why = worker.call(target, args, cap, self.limits.wall_seconds)
        meter.charge(used)
        self._checkin(worker, healthy=reply is not None and self._fresh(worker))
        if reply is None:
            raise ScorerFailed(why)
        if reply.error:
            raise ScorerFailed(f"the scorer {reply.error}")
        return reply.value

    def _checkout(self, sender: str) -> Worker:
        with self._cond:
            while True:
                for pid, w in self._idle.items():
                    if w.sender == sender:
                        return self._idle.pop(pid)
                if self._busy + len(self._idle) < self.limits.workers or self._idle:
                    if self._busy + len(self._idle) >= self.limits.workers:
                        self._idle.popitem(last=False)[1].kill()  # least recently used, another sender's
                        self.kills += 1
                    self._busy += 1
                    break
                self._cond.wait()
        try:
            return self._fork(sender)
        except BaseException:
            with self._cond:
                self._busy -= 1
                self._cond.notify()
            raise

    def _checkin(self, worker: Worker, healthy: bool) -> None:
        with self._cond:
            self._busy -= 1
            if healthy:
                self._idle[worker.pid] = worker
            else:
                worker.kill()
                self.kills += 1
            self._cond.notify()

    @staticmethod
    def _fresh(worker: Worker) -> bool:
        """Not near its lifetime CPU cap (retired at half: the kernel's cap never meets a job)."""
        times = run_and_wait(worker.pid)
        return times is not None and times[0] < WORKER_CPU_SECONDS / 2

    def _fork(self, sender: str) -> Worker:
        with self._cond:  # one fork request at a time on the control socket
            alive = self._control is not None and self._zygote is not None and self._zygote.poll() is None
            control = self._control if alive and self._control is not None else self._start()
            control.sendall(b"f")
            msg, fds, _, _ = socket.recv_fds(control, 4, 1)
            if len(msg) != 4 or len(fds) != 1:
                raise ScorerFailed("the scorer sandbox's zygote did not fork a worker")
            self.forks += 1
            return Worker(int.from_bytes(msg, "big"), socket.socket(fileno=fds[0]), sender)

    def _start(self) -> socket.socket:
        """Start the zygote (lazily: peers that never score untrusted text never pay for it).
        This process becomes non-dumpable first: a worker, root or not, cannot read its memory."""
        not_dumpable()
        if self._control is not None:  # a zygote that died: its socket goes with it
            self._control.close()
        ours, theirs = socket.socketpair()
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        args = [sys.executable, "-m", "genrl_swarm.scoring.zygote", msgspec.json.encode(self.limits).decode(), str(self._scratch), *self.modules]
        self._zygote = subprocess.Popen(args, stdin=theirs.fileno(), env=env)  # noqa: S603 - our own module
        theirs.close()
        ours.settimeout(START_TIMEOUT)
        try:
            hello = ours.recv(1)
        except TimeoutError:
            hello = b""
        if hello not in (b"i", b"n"):
            self._zygote.kill()
            raise ScorerFailed(f"the scorer sandbox did not start (code {self._zygote.wait()})")
        ours.settimeout(None)
        self.isolated, self._control = hello == b"i", ours
        if not self.isolated:
            log.warning("scorer sandbox: no network namespace here (the kernel refused it); the audit hook still refuses sockets")
        return ours

    def close(self) -> None:
        with self._cond:
            for w in self._idle.values():
                w.kill()
            self._idle.clear()
            if self._control is not None:
                self._control.close()
            if self._zygote is not None:
                self._zygote.kill()
                self._zygote.wait()
            shutil.rmtree(self._scratch, ignore_errors=True)


_shared: ScorerPool | None = None
_shared_lock = threading.Lock()


def started() -> bool:
    """Whether this process's shared pool exists (its limits are then fixed)."""
    return _shared is not None


def shared_pool(limits: ScorerLimits | None = None, modules: tuple[str, ...] = ()) -> ScorerPool:
    """The process's pool (peers of an in-memory swarm share it; each sender gets its own worker)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ScorerPool(limits or ScorerLimits(), modules)
            atexit.register(_shared.close)
        return _shared
