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
* **A DHT process that dies leaves hivemind's locks free.** hivemind's ``MPFuture`` guards the
  pipes its processes answer over with locks shared by every process forked from the peer's; one
  held by a process that died stays held for good, and every DHT process started after it hangs
  before it is ready (seen in a test process: a DHT killed mid-send, then each later start timed
  out). A DHT process stopped by SIGTERM releases what it holds (``release_held_locks``); before
  each start the peer's process takes each lock for a moment and replaces one nobody releases
  (``free_shared_locks``: the holder was killed outright).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
from collections.abc import Iterable
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


def release_held_locks() -> None:
    """Release the shared locks this thread holds: a process about to exit mid-send (a signal
    handler runs in the main thread, which is where the DHT's loop sends) must not take them along."""
    for owner, name in _shared_locks():
        lock = getattr(owner, name)
        if lock._semlock._is_mine():
            lock.release()


def free_shared_locks(grace: float = 5.0) -> None:
    """Take each shared lock for a moment; one that nobody releases within ``grace`` seconds was
    left held by a process that died, and is replaced for the processes forked from now on (the
    ones forked before are stuck on it already; a live holder sends one small message under it)."""
    import multiprocessing

    for owner, name in _shared_locks():
        lock = getattr(owner, name)
        if lock.acquire(timeout=grace):
            lock.release()
            continue
        log.warning("hivemind's %s.%s is held by a process that died: replaced", owner.__name__, name)
        setattr(owner, name, multiprocessing.Lock())


def _die_with_parent() -> None:
    """Ask for SIGTERM when the parent dies, and on SIGTERM kill our children (p2pd) and exit."""

    def stop(signum: int, frame: object) -> None:
        release_held_locks()
        for child in children(os.getpid()):
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                continue
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: no parent-death signal to ask for
        return
    if os.getppid() == 1:  # the parent died before the request took effect
        stop(signal.SIGTERM, None)


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
