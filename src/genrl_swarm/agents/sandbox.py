"""A sandboxed child process that runs task code (setups and tool calls) for one worker.

Started by the worker (``python -m genrl_swarm.agents.sandbox '<limits json>' <scratch root>``),
it serves jobs over its stdin/stdout until end of input. Before the first job it:

- sets rlimits: address space (memory), file size, no core files, no new processes; CPU time is
  re-armed before every job (soft RLIMIT_CPU = used + budget, so SIGXCPU ends a spinning job);
- dies with its worker (PR_SET_PDEATHSIG);
- leaves the network: a new user + network namespace (only a down loopback) when the kernel
  allows it, reported in ``isolation()``;
- installs an audit hook that refuses sockets, new processes, ctypes, and opening files outside
  the scratch root (reads of the interpreter's own files excepted).

The audit hook is a Python-level guard against our own tool code going wrong, not a security
boundary (native code can bypass it); the namespace and the rlimits are enforced by the kernel.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import msgspec

from genrl_swarm.agents.frames import read_frame_blocking, write_frame_blocking
from genrl_swarm.agents.jobs import EXIT_MEMORY, Job, Reply, SandboxLimits, SetupJob
from genrl_swarm.agents.tasks import TASKS, ToolFailure

CLONE_NEWUSER, CLONE_NEWNET, PR_SET_PDEATHSIG = 0x10000000, 0x40000000, 1
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_DENIED = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "ctypes.", "sqlite3.enable_load_extension")


class SandboxViolation(PermissionError):
    """Tool code tried something the sandbox forbids."""


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def leave_network() -> bool:
    """Move into fresh user and network namespaces (no interfaces up). False when not allowed."""
    return _libc().unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0


def set_limits(limits: SandboxLimits) -> None:
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb << 20, limits.memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_mb << 20, limits.file_mb << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))  # not enforced for root; the audit hook covers it
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write then fails with EFBIG


def arm_cpu(seconds: float) -> None:
    """Allow ``seconds`` more CPU time from now (SIGXCPU, which kills, past it)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(usage.ru_utime + usage.ru_stime + seconds) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.getrlimit(resource.RLIMIT_CPU)[1]))


def audit_hook(root: Path) -> Any:
    """Refuse network, processes and ctypes; files only under ``root`` (reads also under sys.path)."""
    readable = tuple(str(Path(p).resolve()) for p in {*sys.path, sys.prefix, sys.base_prefix} if p)
    writable = str(root.resolve())

    def inside(path: Any, where: tuple[str, ...]) -> bool:
        if isinstance(path, int):
            return True  # an fd this process already holds
        text = os.fsdecode(path).removeprefix("file:").split("?")[0]
        full = os.path.realpath(text)
        return any(full == w or full.startswith(w + os.sep) for w in where)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event.startswith(_DENIED):
            raise SandboxViolation(f"sandbox: {event} is not allowed")
        if event == "open" and args[0] is not None:
            mode, flags = args[1], args[2] if len(args) > 2 else 0
            write = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
            if not inside(args[0], (writable,) if write else (writable, *readable)):
                raise SandboxViolation(f"sandbox: opening {args[0]!r} outside the scratch directory")
        elif event == "sqlite3.connect" and not inside(args[0], (writable,)):
            raise SandboxViolation(f"sandbox: database {args[0]!r} outside the scratch directory")

    return hook


def run(job: Job) -> Reply:
    """One job. Model-fixable failures and tool-code crashes come back as replies; a MemoryError
    is re-raised (the heap may be damaged: the process exits with EXIT_MEMORY, unanswered)."""
    task = TASKS[job.task]
    scratch = Path(job.scratch) if job.scratch else None
    try:
        if isinstance(job, SetupJob):
            return Reply("ok", setup=task.setup(job.seed, scratch))
        return Reply("ok", outcome=task.call(job.tool, job.arguments, job.state, scratch))
    except ToolFailure as e:
        return Reply("tool_failed", str(e))
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - tool code is untrusted to be correct; it ends the session, not the child
        return Reply("crashed", f"{type(e).__name__}: {e}"[:500])


def serve(limits: SandboxLimits, root: Path) -> None:
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)  # a tool that prints cannot corrupt the protocol
    os.chdir(root)
    networked = not leave_network()
    set_limits(limits)
    sys.addaudithook(audit_hook(root))
    decoder, encoder = msgspec.msgpack.Decoder(Job), msgspec.msgpack.Encoder()
    write_frame_blocking(proto_out, encoder.encode(Reply("ok", "networked" if networked else "no network")))
    while (frame := read_frame_blocking(proto_in)) is not None:
        arm_cpu(limits.cpu_seconds)
        try:
            reply = run(decoder.decode(frame))
        except MemoryError:
            os._exit(EXIT_MEMORY)
        write_frame_blocking(proto_out, encoder.encode(reply))


if __name__ == "__main__":
    sqlite3.connect(":memory:").close()  # load the extension module before the hook is installed
    serve(msgspec.json.decode(sys.argv[1], type=SandboxLimits), Path(sys.argv[2]))
