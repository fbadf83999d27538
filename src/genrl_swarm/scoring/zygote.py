"""The scorer sandbox's processes: a zygote that never sees a stranger's text, and its workers.

Started by ``ScorerPool`` as ``python -m genrl_swarm.scoring.zygote <limits json> <scratch>
<module> ...`` with a control socket as its stdin. The zygote leaves the network (new user and
network namespaces), imports the scorer modules once, caps its address space, and then forks one
worker per request, handing the worker's socket back over the control socket. A worker is
forked warm (no import on the clock) and serves one sender only: whatever a stranger's text did
to a worker's memory never reaches another sender's bodies. Workers add the rest of the
sandbox: no new processes, an audit hook (files only in scratch, no sockets, no ctypes), death
with the zygote, CPU time re-armed per job. The zygote exits when the peer closes its socket.
"""

from __future__ import annotations

import importlib
import math
import os
import pickle
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import msgspec

from genrl_swarm.sandbox import seccomp
from genrl_swarm.sandbox.frames import read_frame_blocking, write_frame_blocking
from genrl_swarm.sandbox.kernel import VIOLATIONS, arm_cpu, audit_hook, die_with_parent, forbid_processes, leave_network, limit_memory_and_files
from genrl_swarm.scoring.jobs import WORKER_CPU_SECONDS, ScoreReply, ScorerLimits
from genrl_swarm.scoring.targets import resolve

EXIT_MEMORY = 3


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmSize:"))


def run_job(target: str, args: tuple[Any, ...]) -> ScoreReply:
    try:
        value = float(resolve(target)(*args))
    except MemoryError:
        os._exit(EXIT_MEMORY)  # the heap may be damaged: leave unanswered
    except Exception as e:  # noqa: BLE001 - the scorer is untrusted to be correct; the reply says why
        return ScoreReply(error=f"raised {type(e).__name__}: {e}"[:300])
    return ScoreReply(value=value) if math.isfinite(value) else ScoreReply(error=f"returned {value}")


def confine(scratch: Path) -> bool:
    """A forked worker's own limits, before the first stranger's text: death with the zygote, no
    new processes, memory others cannot read, a lifetime CPU cap (the peer cuts each job finer,
    and replaces a worker long before the cap), the seccomp filter (the kernel's refusals), then
    the audit hook. False when the kernel has no seccomp filter for this architecture."""
    die_with_parent()
    forbid_processes()
    seccomp.not_dumpable()
    arm_cpu(WORKER_CPU_SECONDS)
    filtered = seccomp.install()
    sys.addaudithook(audit_hook(scratch))
    return filtered


def work(fd: int, scratch: Path) -> None:
    """A worker: jobs in, typed replies out (each echoing its job's nonce), until the peer closes
    the socket."""
    confine(scratch)
    encode = msgspec.msgpack.Encoder().encode
    while (frame := read_frame_blocking(fd)) is not None:
        nonce, target, args = pickle.loads(frame)
        seen = len(VIOLATIONS)
        reply = run_job(target, args)
        if len(VIOLATIONS) > seen:  # the scorer may have caught the refusal: the attempt still counts
            reply = ScoreReply(error=f"tried what the sandbox forbids ({VIOLATIONS[seen]})")
        write_frame_blocking(fd, encode(msgspec.structs.replace(reply, nonce=nonce)))


def fork_worker(control: socket.socket, scratch: Path) -> None:
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        control.close()
        ours.close()
        try:
            work(theirs.fileno(), scratch)
        finally:
            os._exit(0)
    theirs.close()
    socket.send_fds(control, [pid.to_bytes(4, "big")], [ours.fileno()])
    ours.close()


def serve(limits: ScorerLimits, scratch: Path, modules: list[str]) -> None:
    control = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)  # a scorer that prints cannot reach the peer's terminal
    os.chdir(scratch)
    isolated = leave_network()  # before any import can start a thread (unshare needs one thread)
    for module in modules:
        importlib.import_module(module)
    limit_memory_and_files(_vm_size() + (limits.memory_mb << 20), limits.file_mb)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    control.sendall(b"i" if isolated else b"n")
    while control.recv(1) == b"f":
        fork_worker(control, scratch)


if __name__ == "__main__":
    serve(msgspec.json.decode(sys.argv[1], type=ScorerLimits), Path(sys.argv[2]), sys.argv[3:])
