"""The kernel limits every sandboxed child of this project runs under (tools and scorers alike).

- rlimits: address space (memory), file size, no core files, no new processes; CPU time is
  re-armed before every job (soft RLIMIT_CPU = used + budget, hard one second later);
- death with its parent (PR_SET_PDEATHSIG);
- no network: a new user + network namespace (only a down loopback) when the kernel allows it;
- an audit hook that refuses sockets, new processes, ctypes, and opening files outside the
  scratch root (reads of the interpreter's own files excepted).

The audit hook is a Python-level guard against code going wrong, not a security boundary
(native code can bypass it); the namespaces and the rlimits are enforced by the kernel.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
from pathlib import Path
from typing import Any

CLONE_NEWUSER, CLONE_NEWNET, PR_SET_PDEATHSIG = 0x10000000, 0x40000000, 1
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_DENIED = (
    "socket.",
    "subprocess.",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "ctypes.",
    "sqlite3.enable_load_extension",
)


class SandboxViolation(PermissionError):
    """Sandboxed code tried something the sandbox forbids."""


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def leave_network() -> bool:
    """Move into fresh user and network namespaces (no interfaces up). False when not allowed."""
    return _libc().unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0


def die_with_parent() -> None:
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def limit_memory_and_files(memory_bytes: int, file_mb: int) -> None:
    """Address space, largest file, no core files; an oversized write then fails with EFBIG."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb << 20, file_mb << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def forbid_processes() -> None:
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))  # not enforced for root; the audit hook covers it


def set_limits(memory_mb: int, file_mb: int) -> None:
    die_with_parent()
    limit_memory_and_files(memory_mb << 20, file_mb)
    forbid_processes()


def arm_cpu(seconds: float) -> None:
    """Allow ``seconds`` more CPU time from now (SIGXCPU, which kills, past it). Whole seconds:
    the kernel's granularity; callers that need finer cuts add a timer and a clock outside."""
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

    def refuse(why: str) -> None:
        VIOLATIONS.append(why[:200])
        raise SandboxViolation(why)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event.startswith(_DENIED):
            refuse(f"sandbox: {event} is not allowed")
        if event == "open" and args[0] is not None:
            mode, flags = args[1], args[2] if len(args) > 2 else 0
            write = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
            if not inside(args[0], (writable,) if write else (writable, *readable)):
                refuse(f"sandbox: opening {args[0]!r} outside the scratch directory")
        elif event == "sqlite3.connect" and not inside(args[0], (writable,)):
            refuse(f"sandbox: database {args[0]!r} outside the scratch directory")

    return hook


#: What the audit hook refused in this process, newest last: code that catches the exception
#: (a scorer's ``except Exception``) does not hide the attempt from whoever reads this.
VIOLATIONS: list[str] = []


def process_cpu(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (all its threads), read by its parent from
    /proc: what a process says of itself cannot be trusted once untrusted code ran in it. None
    once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15 of stat


def run_and_wait(pid: int) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable but waiting for one) of the single-threaded process
    ``pid``, from the scheduler's own count (/proc/<pid>/schedstat, nanoseconds). Wall time minus
    the wait is what the process cost, whatever it did with it: computed, slept, blocked, or
    stopped itself; the wait is a loaded machine's doing. None once it is gone."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            run_ns, wait_ns, _ = f.read().split()
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    return int(run_ns) / 1e9, int(wait_ns) / 1e9


_TICKS = os.sysconf("SC_CLK_TCK")
