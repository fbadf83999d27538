"""The peer's side of the scorer sandbox: a zygote, and a fresh worker for every call.

``call`` runs ``module:function(*args)`` in a worker forked for that call alone and killed after
it, on behalf of the current sender (``core.meter``), and charges that sender everything the call
cost this peer: the fork, and the wall time of the call minus the time the worker waited for a
CPU (read from /proc by this process, never reported by the sandbox). The reply is read under
one deadline from the moment the call starts, byte by byte as it comes: a worker that writes half
a frame and sleeps, or drips a byte at a time, is charged every second and killed at the sender's
remaining budget (or ``cpu_seconds``, whichever is lower). The zygote runs inside the kernel's
sandbox (``sandbox.jail``); where the kernel cannot build it, the pool refuses to start unless
the operator set ``unconfined``.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import pickle
import secrets
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgspec

from genrl_swarm.core import meter
from genrl_swarm.core.decoders import msgpack_decoder
from genrl_swarm.core.meter import Unavailable
from genrl_swarm.sandbox import jail
from genrl_swarm.sandbox.frames import pack
from genrl_swarm.sandbox.kernel import run_and_wait
from genrl_swarm.sandbox.seccomp import not_dumpable
from genrl_swarm.scoring.jobs import Confinement, ScoreReply, ScorerFailed, ScorerLimits, ZygoteSpec

log = logging.getLogger(__name__)
START_TIMEOUT = 120.0  # a loaded machine can take a while to import the scorers
FORK_TIMEOUT = 30.0  # a fork takes milliseconds; past this the zygote is wedged and is replaced
_POLL = 0.02  # seconds between looks at a running worker's clocks
_MAX_REPLY = 1 << 16
_UCRED = struct.Struct("3i")  # SO_PEERCRED: pid, uid, gid
_decode_reply = msgpack_decoder(ScoreReply).decode


class Worker:
    """One forked sandboxed process, for one call. Its pid comes from the kernel (the socket's
    creator, in this process's PID namespace), and it is held by a pidfd so that a kill can never
    reach a process that reused the number."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))[0]
        self.pidfd = os.pidfd_open(self.pid)
        self.waited = 0.0  # seconds of its call it spent waiting for a CPU (not charged)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        os.close(self.pidfd)
        self.sock.close()

    def call(self, target: str, args: tuple[Any, ...], cap: float, wall: float) -> tuple[ScoreReply | None, float, str]:
        """(reply or None, seconds to charge, why it failed). Charged: wall time minus the time
        the worker waited for a CPU (``run_and_wait``): computing, sleeping, blocking, stopping
        itself or writing half a reply all hold this peer; waiting on a loaded machine is not
        the sender's doing. Past ``cap`` charged seconds, or ``wall`` seconds in all, it fails."""
        nonce = secrets.randbits(63)
        times = run_and_wait(self.pid)
        if times is None:
            return None, 0.0, "the scorer's process was gone"
        start, waited0, charged = time.monotonic(), times[1], 0.0
        try:
            self.sock.settimeout(wall)  # a worker that stops reading cannot hold the send forever
            self.sock.sendall(pack(pickle.dumps((nonce, target, args))))
        except OSError as e:
            return None, 0.0, f"the scorer's process was gone ({type(e).__name__})"
        self.sock.setblocking(False)
        got = bytearray()
        while True:
            ready, _, _ = select.select([self.sock], [], [], _POLL)
            times = run_and_wait(self.pid) or times  # None once it died: keep the last count
            self.waited = times[1] - waited0
            charged = max(charged, time.monotonic() - start - self.waited)
            if ready:
                chunk = _read_some(self.sock)
                if chunk == b"":
                    return None, charged, "the scorer's process died or closed its socket without a whole reply"
                got += chunk or b""
                done, reply, why = _parse(bytes(got), nonce)
                if done:
                    return reply, charged, why
            if charged > cap:
                return None, charged, f"the scorer took over {cap:.2f} s (CPU, sleep, blocked or a partial reply)"
            if time.monotonic() - start > wall:
                return None, charged, f"the scorer did not finish within {wall:g} s"


def _read_some(sock: socket.socket) -> bytes | None:
    """What the worker wrote so far: b"" at the end of its stream, None when nothing is there yet."""
    try:
        return sock.recv(_MAX_REPLY + 8)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _printable(text: str) -> str:
    """A sandbox's error text as this peer logs it: no control characters (a worker writes what it
    likes, terminal escapes included), at most 300 of them."""
    return "".join(c if c.isprintable() else "?" for c in text[:300])


def _stopped(pid: int) -> bool:
    """Whether the kernel has process ``pid`` stopped (or gone): such a worker is not used."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] in (b"T", b"t", b"Z", b"X")
    except OSError:
        return True


def _parse(data: bytes, nonce: int) -> tuple[bool, ScoreReply | None, str]:
    """(whether the reply is complete or broken, the reply, why it was refused) from the bytes
    so far: one frame of at most ``_MAX_REPLY`` bytes holding the job's nonce, nothing after it."""
    if len(data) < 4:
        return False, None, ""
    size = int.from_bytes(data[:4], "big")
    if size > _MAX_REPLY:
        return True, None, f"the scorer's process broke the protocol (a reply of {size} bytes)"
    if len(data) < 4 + size:
        return False, None, ""
    try:
        reply = _decode_reply(data[4 : 4 + size])
    except msgspec.DecodeError as e:
        return True, None, f"the scorer's process broke the protocol (DecodeError: {e})"
    if len(data) > 4 + size or reply.nonce != nonce:
        return True, None, "the scorer's process broke the protocol (a reply for another job, or frames it was not asked for)"
    return True, reply, ""


class ScorerPool:
    """Sandboxed workers for code we did not write; ``call`` is thread-safe."""

    def __init__(self, limits: ScorerLimits, modules: tuple[str, ...] = ()) -> None:
        self.limits, self.modules = limits, modules
        self._slots = threading.BoundedSemaphore(limits.workers)  # calls at once, a worker each
        self._lock = threading.Lock()  # the control socket: one fork at a time
        self._zygote: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._asked = False  # a fork requested and not yet received: the next call's worker
        self._scratch: Path | None = None  # on the host only when unconfined; jailed, the sandbox has its own
        self.confinement: Confinement | None = None
        self.forks = 0
        self.cpu_wait = 0.0  # seconds workers waited for a CPU, all calls: a loaded machine's, nobody's charge

    def call(self, target: str, *args: Any) -> float:
        """``target(*args)`` in a fresh sandboxed worker, on the current sender's behalf;
        ScorerFailed if it gives no score within its limits (charged to the sender either way)."""
        with self._slots:
            worker, forked = self._fork()
            meter.charge(forked)
            try:
                cap = min(self.limits.cpu_seconds, meter.remaining())
                reply, used, why = worker.call(target, args, cap, self.limits.wall_seconds)
            finally:
                worker.kill()
                self.cpu_wait += worker.waited
        meter.charge(used)
        if reply is None:
            raise ScorerFailed(why)
        if reply.error:
            raise ScorerFailed(f"the scorer {_printable(reply.error)}")
        if not math.isfinite(reply.value):  # the worker checks it too, but its word is the stranger's
            raise ScorerFailed(f"the scorer returned {reply.value}")
        return reply.value

    def _fork(self) -> tuple[Worker, float]:
        """A fresh worker, and the seconds it took to get it (the sender's; starting the zygote is
        not). One fork is always asked ahead, so a call usually finds its worker waiting; one the
        kernel reports stopped is thrown away for the next."""
        with self._lock:
            alive = self._control is not None and self._zygote is not None and self._zygote.poll() is None
            control = self._control if alive and self._control is not None else self._start()
            began = time.monotonic()
            for _ in range(2):
                worker = self._receive(control)
                if not _stopped(worker.pid):
                    return worker, time.monotonic() - began
                worker.kill()
            raise Unavailable("the scorer sandbox forked only stopped workers")

    def _receive(self, control: socket.socket) -> Worker:
        """The worker asked for last, asking for the next; a zygote that does not answer within
        ``FORK_TIMEOUT`` is killed (the next call starts a new one)."""
        try:
            if not self._asked:
                control.sendall(b"f")
            msg, fds, _, _ = socket.recv_fds(control, 1, 1)
            control.sendall(b"f")  # the next call's worker forks and confines itself meanwhile
            self._asked = True
        except OSError as e:  # TimeoutError too: a zygote that stopped forking
            self._asked = False
            if self._zygote is not None:
                self._zygote.kill()
            raise Unavailable(f"the scorer sandbox's zygote did not fork ({type(e).__name__})") from e
        if msg != b"w" or len(fds) != 1:
            raise Unavailable("the scorer sandbox's zygote did not fork a worker")
        self.forks += 1
        return Worker(socket.socket(fileno=fds[0]))

    def _start(self) -> socket.socket:
        """Start the zygote (lazily: peers that never score untrusted text never pay for it),
        jailed, or unconfined where the operator chose so. This process becomes non-dumpable
        first: a worker, root or not, cannot read its memory."""
        not_dumpable()
        if self._control is not None:  # a zygote that died: its socket goes with it
            self._control.close()
        self._asked = False
        spec, argv = self._command()
        ours, theirs = socket.socketpair()
        env = {} if spec.confinement is Confinement.JAILED else dict(jail.ENV)  # never a variable of the peer's
        self._zygote = subprocess.Popen(argv, stdin=theirs.fileno(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)  # noqa: S603
        theirs.close()
        ours.settimeout(START_TIMEOUT)
        try:
            hello = ours.recv(1)
        except TimeoutError:
            hello = b""
        if hello not in {c.value.encode() for c in Confinement}:
            self._zygote.kill()
            err = self._zygote.communicate()[1].decode(errors="replace").strip().splitlines()
            raise Unavailable(f"the scorer sandbox did not start (code {self._zygote.returncode}{': ' + err[-1][:200] if err else ''})")
        ours.settimeout(FORK_TIMEOUT)  # every later fork: a wedged zygote never hangs a call
        self.confinement, self._control = Confinement(hello.decode()), ours
        if self.confinement is not Confinement.JAILED:
            log.warning(
                "scorer sandbox: UNCONFINED (trust.scorer.unconfined): third-party scorers see this machine's files; %s", self.confinement.name
            )
        return ours

    def _command(self) -> tuple[ZygoteSpec, list[str]]:
        """The zygote's spec and command line: inside the jail where the kernel allows it, else
        only with the operator's ``unconfined`` (Unavailable otherwise)."""
        view = jail.view_for(("genrl_swarm", *self.modules))
        why = jail.probe()
        if why and not self.limits.unconfined:
            raise Unavailable(f"the scorer sandbox cannot be built here: {why}")
        if why:
            self._scratch = self._scratch or Path(tempfile.mkdtemp(prefix="genrl-scorers-"))
            spec = ZygoteSpec(self.limits, self.modules, view.import_path, str(self._scratch), Confinement.NONE)
        else:
            spec = ZygoteSpec(self.limits, self.modules, view.import_path, jail.SCRATCH, Confinement.JAILED)
        argv = [sys.executable, "-I", "-m", "genrl_swarm.scoring.zygote", msgspec.json.encode(spec).decode()]
        return spec, argv if why else jail.command(view, argv)

    def close(self) -> None:
        with self._lock:
            if self._control is not None:
                self._control.close()
            if self._zygote is not None:
                self._zygote.kill()
                self._zygote.communicate()
            if self._scratch is not None:
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
