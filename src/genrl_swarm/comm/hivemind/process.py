"""hivemind's DHT child process, made safe to run under a swarm peer.

The fixes live here, all applied inside the forked DHT process:

* **The control pipe is blocking again.** hivemind registers its end of the parent->child pipe
  with the event loop, which makes the descriptor non-blocking. CPython sends a message over
  16 KiB as a header and a body; a read that hits EAGAIN between them has already consumed the
  header, the next read raises ``EOFError`` and the DHT process dies. With a blocking
  descriptor every read returns a whole message (the loop only reads after ``poll()``).
* **It holds no identity lock.** A forked child inherits every open descriptor, so the DHT
  process of one peer would keep the identity locks of the other peers this process hosts
  (tests, benchmarks) until it exits; it closes them first.
* **A terminal's Ctrl-C is not for it.** It runs in its own process group, so Ctrl-C (or SIGTERM
  to the group) stops the peer in order instead of killing the DHT and p2pd under it.
* **It dies with its parent.** When the peer process dies, even by SIGKILL, the DHT process
  takes p2pd down and exits, instead of lingering as an orphan that still holds the peer id.
* **A DHT process that dies does not take the next one with it.** hivemind's ``MPFuture`` sends
  answers over a pipe to the peer's process, under locks shared by every process forked from it;
  one killed mid-send leaves the lock held for good (and half a message in the pipe), and every
  DHT process started after it hung before it was ready (seen in a test process after a DHT was
  killed). On SIGTERM a DHT process finishes the update it is sending before it exits
  (``_Sends``); before each start the peer's process checks the locks and, if one is stuck (the
  holder was SIGKILLed), rebuilds hivemind's backend (``free_shared_locks``).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import os
import signal
import threading
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Descriptors of the identity locks this process holds; a forked DHT process closes its copies.
LOCK_FDS: set[int] = set()


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc; empty elsewhere)."""
    found: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def p2pd_of(dht_pid: int) -> int | None:
    """The p2pd daemon the DHT process ``dht_pid`` started, if it can be found."""
    for child in children(dht_pid):
        try:
            if "p2pd" in Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace"):
                return child
        except OSError:
            continue
    return None


def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a dead child its parent has not reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (not Linux): ask the kernel directly
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


def _shared_locks() -> list[tuple[Any, str]]:
    """(owner, attribute) of each lock hivemind shares between the processes forked from one."""
    from hivemind.utils.mpfuture import MPFuture, SharedBytes

    return [(MPFuture, "_update_lock"), (MPFuture, "_initialization_lock"), (SharedBytes, "_lock")]


#: The DHT processes this process started (to know whether any is still alive).
STARTED: weakref.WeakSet[Any] = weakref.WeakSet()


def free_shared_locks(grace: float = 5.0) -> None:
    """Take each shared lock for a moment. One that nobody releases within ``grace`` seconds was
    left held by a DHT process killed mid-send, which may also have left half a message in the
    pipe this process reads answers from: with no DHT process of ours alive, hivemind's whole
    backend is rebuilt (new pipe, reader and locks); with some alive (several peers in one
    process), only the locks are replaced, for the DHT processes started from now on."""
    from hivemind.utils.mpfuture import MPFuture

    stuck = []
    for owner, name in _shared_locks():
        lock = getattr(owner, name)
        if lock.acquire(timeout=grace):
            lock.release()
        else:
            stuck.append((owner, name))
    if not stuck:
        return
    names = ", ".join(f"{owner.__name__}.{name}" for owner, name in stuck)
    if not any(dht.is_alive() for dht in STARTED):
        log.warning("hivemind's %s held by a DHT process that died: its backend is rebuilt", names)
        MPFuture.reset_backend()
        return
    log.warning("hivemind's %s held by a DHT process that died: replaced (other DHT processes of this one are running)", names)
    for owner, name in stuck:
        setattr(owner, name, multiprocessing.Lock())


class _Sends:
    """In a DHT process: how many MPFuture updates are being sent, and whether a SIGTERM came
    meanwhile. A stop in the middle of a send would leave half a message in the peer's pipe and
    the pipe's lock held; it waits for the send instead (at most ``STOP_GRACE`` seconds)."""

    active = 0
    stop_pending = False


STOP_GRACE = 2.0


def _send_whole(send: Callable[..., Any], stop: Callable[[], None]) -> Callable[..., Any]:
    def whole(*args: Any, **kwargs: Any) -> Any:
        _Sends.active += 1
        try:
            return send(*args, **kwargs)
        finally:
            _Sends.active -= 1
            if _Sends.stop_pending and not _Sends.active:
                stop()

    return whole


def _die_with_parent() -> None:
    """Ask for SIGTERM when the parent dies, and on SIGTERM kill our children (p2pd) and exit,
    after any MPFuture update being sent (``_Sends``)."""
    from hivemind.utils.mpfuture import MPFuture

    def stop() -> None:
        for child in children(os.getpid()):
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                continue
        os._exit(0)

    def on_sigterm(signum: int, frame: object) -> None:
        if not _Sends.active:
            stop()
        _Sends.stop_pending = True
        threading.Timer(STOP_GRACE, stop).start()  # a send to a parent that stopped reading must not keep us alive

    MPFuture._send_update = _send_whole(MPFuture._send_update, stop)  # this process only: it was forked
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: no parent-death signal to ask for
        return
    if os.getppid() == 1:  # the parent died before the request took effect
        stop()


def _leave_the_terminals_group() -> None:
    """Move this process (and so the p2pd it starts) into a process group of its own: a
    terminal's Ctrl-C, or a SIGTERM sent to the group, then reaches only the peer's own process,
    which stops after its round step and saves, with the DHT and p2pd still serving it until it
    closes them. (They still die with the peer: see ``_die_with_parent``.)"""
    try:
        os.setpgid(0, 0)
    except OSError:  # already a group or session leader: nothing to leave
        return


def _loop_with_blocking_pipe(pipe_fd: int) -> asyncio.AbstractEventLoop:
    """hivemind's ``switch_to_uvloop``, except that registering ``pipe_fd`` for reading leaves it
    blocking (see the module docstring)."""
    import uvloop

    class Loop(uvloop.Loop):
        def add_reader(self, fd: Any, callback: Any, *args: Any) -> None:  # type: ignore[override]
            super().add_reader(fd, callback, *args)
            if (fd if isinstance(fd, int) else fd.fileno()) == pipe_fd:
                os.set_blocking(pipe_fd, True)

    loop = Loop()
    asyncio.set_event_loop(loop)
    return loop


def dht_class() -> Any:
    """hivemind.DHT with the two fixes above (a class built on first use: hivemind is optional)."""
    import hivemind
    import hivemind.dht.dht as dht_module

    class PeerDHT(hivemind.DHT):  # type: ignore[misc]
        def run(self) -> None:  # runs in the forked child only
            _leave_the_terminals_group()
            _die_with_parent()
            for lock_fd in list(LOCK_FDS):
                try:
                    os.close(lock_fd)
                except OSError:
                    continue
            fd = self._inner_pipe.fileno()
            dht_module.switch_to_uvloop = lambda: _loop_with_blocking_pipe(fd)
            super().run()

    return PeerDHT


def kill_all(pids: Iterable[int | None]) -> None:
    """SIGKILL each pid still running (a p2pd orphaned by a DHT process that was killed)."""
    for pid in pids:
        if pid is not None and running(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
