"""The scorer sandbox's processes: a zygote that never sees a stranger's text, and its workers.

Started by ``ScorerPool`` as ``python -I -m genrl_swarm.scoring.zygote <ZygoteSpec json>``, inside
the kernel's sandbox (``sandbox.jail``: its own namespaces, filesystem view, empty environment,
no terminal) unless the operator opted out, with a control socket as its stdin. The zygote
imports the scorer modules once, caps its address space, and then forks one worker per call. A
worker is forked warm (no import on the clock), makes its own socket pair (so the peer learns
its pid from the kernel, ``SO_PEERCRED``, not from anything the sandbox says), hands one end to
the peer, confines itself (no new processes, seccomp, audit hook, CPU cap), serves exactly one
job and exits: nothing a stranger's text did to a worker reaches any later call. The zygote
holds no secret and runs no stranger's code; it exits when the peer closes its socket.
"""

from __future__ import annotations

import importlib
import math
import os
import pickle
import resource
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import msgspec

from genrl_swarm.sandbox import seccomp
from genrl_swarm.sandbox.frames import read_frame_blocking, write_frame_blocking
from genrl_swarm.sandbox.kernel import VIOLATIONS, arm_cpu, audit_hook, die_with_parent, forbid_processes, leave_network, limit_memory_and_files
from genrl_swarm.scoring.jobs import Confinement, ScoreReply, ZygoteSpec
from genrl_swarm.scoring.targets import resolve

EXIT_MEMORY = 3
MAX_FILES = 32  # open files a worker may hold: its socket and a scorer's few reads


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


def confine(cpu_seconds: float) -> bool:
    """A forked worker's kernel limits, before it can receive the stranger's text: death with the
    zygote, no new processes, memory others cannot read, a CPU cap (the kernel's backstop: the
    peer cuts the job finer, at the sender's budget), then the seccomp filter (the kernel's
    refusals). False when the kernel has no seccomp filter for this architecture."""
    die_with_parent()
    forbid_processes()
    seccomp.not_dumpable()
    arm_cpu(cpu_seconds)
    resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_FILES, MAX_FILES))  # pipes and files hold memory too
    return seccomp.install()


def work(sock: socket.socket) -> None:
    """A confined worker: one job in, one typed reply out (echoing the job's nonce), then exit."""
    frame = read_frame_blocking(sock.fileno())
    if frame is None:
        return
    nonce, target, args = pickle.loads(frame)
    seen = len(VIOLATIONS)
    reply = run_job(target, args)
    if len(VIOLATIONS) > seen:  # the scorer may have caught the refusal: the attempt still counts
        reply = ScoreReply(error=f"tried what the sandbox forbids ({VIOLATIONS[seen]})")
    write_frame_blocking(sock.fileno(), msgspec.msgpack.encode(msgspec.structs.replace(reply, nonce=nonce)))


def fork_worker(control: socket.socket, scratch: Path, cpu_seconds: float) -> None:
    """Fork a worker. It makes its own socket pair (the peer reads its pid off it), confines
    itself, and only then sends the peer its end: a worker is whole before anyone can use it, and
    the peer asks for the next one while it uses this one, so none of this is on a call's clock."""
    if os.fork() != 0:
        return
    try:
        ours, theirs = socket.socketpair()
        confine(cpu_seconds)
        socket.send_fds(control, [b"w"], [ours.fileno()])
        control.close()
        ours.close()
        sys.addaudithook(audit_hook(scratch))  # a second line, after the last socket call of ours
        work(theirs)
    finally:
        os._exit(0)


def serve(spec: ZygoteSpec) -> None:
    control = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)  # a scorer that prints cannot reach the peer's terminal
    scratch = Path(spec.scratch)
    os.chdir(scratch)
    confinement = spec.confinement
    if confinement is not Confinement.JAILED and leave_network():  # before any import starts a thread
        confinement = Confinement.NETWORK_ONLY
    sys.path[:0] = spec.import_path
    for module in spec.modules:
        importlib.import_module(module)
    limit_memory_and_files(_vm_size() + (spec.limits.memory_mb << 20), spec.limits.file_mb)
    seccomp.not_dumpable()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    control.sendall(confinement.value.encode())
    while control.recv(1) == b"f":
        fork_worker(control, scratch, spec.limits.cpu_seconds)


if __name__ == "__main__":
    serve(msgspec.json.decode(sys.argv[1], type=ZygoteSpec))
