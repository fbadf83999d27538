"""A seccomp filter for sandboxed workers: the kernel refuses what a worker never needs.

A worker runs code we did not write on a stranger's text. The audit hook of ``kernel`` is a
Python-level guard; this filter is the kernel's: once installed (irrevocably, inherited by
anything the process could start), the syscalls below fail with EPERM:

- signals to any process (``kill``, ``tgkill``, ``pidfd_send_signal``...): a worker cannot stop,
  kill or pause the peer, the zygote or another sender's worker;
- new processes and programs (``fork``, ``clone``, ``execve``...), ``ptrace`` and cross-process
  memory access, namespaces, mounts, io_uring (which would bypass this filter), BPF, keyrings;
- changes to the file system (``mkdir``, ``rename``, ``unlink``, ``chmod``, links, times,
  extended attributes) and any ``open`` for writing: the worker reads, it never writes;
- new sockets and connections (the network namespace already has no interface up);
- limits and priorities (``prlimit64``, ``setpriority``, affinity): nothing a worker can lower
  on the peer;
- System V IPC and POSIX message queues: no object that outlives the worker and that the next
  worker could attach to (a worker serves one call; nothing it made may reach the next);
- ``ioctl`` TIOCSTI and TIOCLINUX: no typing into a terminal, even one the worker somehow holds;
- signals by proxy: ``fcntl`` F_SETOWN, F_SETOWN_EX and F_SETSIG, ``ioctl`` FIOSETOWN and
  SIOCSPGRP (an fd's owner is who the kernel signals on I/O: with it, a worker could stop the
  zygote or the next worker without ``kill``);
- ``memfd_create``: memory outside the address-space limit, in files.

x86-64 only (syscall numbers are per architecture); elsewhere ``install`` returns False and the
sandbox reports that it runs without it.
"""

from __future__ import annotations

import ctypes
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
_ALLOW, _EPERM, _KILL = 0x7FFF0000, 0x00050000 | 1, 0x80000000
_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, PR_SET_DUMPABLE = 38, 22, 2, 4

#: x86-64 syscall numbers refused outright.
DENIED = {
    "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
    "pidfd_send_signal": 424, "pidfd_open": 434, "pidfd_getfd": 438,
    "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "execve": 59, "execveat": 322,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "process_madvise": 440,
    "setns": 308, "unshare": 272, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "bpf": 321, "perf_event_open": 298,
    "userfaultfd": 323, "keyctl": 250, "add_key": 248, "request_key": 249, "personality": 135,
    "creat": 85, "openat2": 437, "mkdir": 83, "mkdirat": 258, "rmdir": 84, "rename": 82, "renameat": 264,
    "renameat2": 316, "unlink": 87, "unlinkat": 263, "link": 86, "linkat": 265, "symlink": 88, "symlinkat": 266,
    "chmod": 90, "fchmod": 91, "fchmodat": 268, "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260,
    "truncate": 76, "ftruncate": 77, "fallocate": 285, "mknod": 133, "mknodat": 259, "utime": 132, "utimes": 235,
    "utimensat": 280, "futimesat": 261, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197,
    "lremovexattr": 198, "fremovexattr": 199, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "socket": 41, "socketpair": 53, "connect": 42, "bind": 49, "listen": 50, "accept": 43, "accept4": 288,
    "setrlimit": 160, "prlimit64": 302, "setpriority": 141, "sched_setaffinity": 203, "sched_setscheduler": 144,
    "sched_setparam": 142, "ioprio_set": 251, "migrate_pages": 256, "move_pages": 279,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "reboot": 169, "acct": 163,
    "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semctl": 66, "semtimedop": 220,
    "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242,
    "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245, "vhangup": 153, "memfd_secret": 447,
    "memfd_create": 319,
}  # fmt: skip
#: open(path, flags) and openat(dirfd, path, flags): refused when flags ask to write or create.
_OPENS = {2: 1, 257: 2}  # syscall -> index of the flags argument
_WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000  # O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND
#: Second-argument values refused per syscall, whatever the fd: ioctl requests that inject terminal
#: input (TIOCSTI, TIOCLINUX) or make an fd signal an owner (FIOSETOWN, SIOCSPGRP); fcntl
#: commands that set an fd's owner or its signal (F_SETOWN, F_SETSIG, F_SETOWN_EX).
_BY_SECOND_ARG = {16: (0x5412, 0x541C, 0x8901, 0x8902), 72: (8, 10, 15)}


Insn = tuple[int, int, int, int]  # code, jump if true, jump if false, constant


def _program() -> list[Insn]:
    """The BPF program. Jumps name blocks; they are resolved to relative offsets at the end."""
    Jump = tuple[int, int | str, int | str, int]
    deny: list[Jump] = [(_RET, 0, 0, _EPERM)]
    kill: list[Jump] = [(_RET, 0, 0, _KILL)]
    head: list[Jump] = [
        (_LD, 0, 0, 4),  # arch
        (_JEQ, 0, "kill", AUDIT_ARCH_X86_64),
        (_LD, 0, 0, 0),  # syscall number
        (_JGE, "kill", 0, 0x40000000),  # the x32 ABI: other numbers for the same calls
        *((_JEQ, "deny", 0, nr) for nr in sorted(DENIED.values())),
        *((_JEQ, f"open{nr}", 0, nr) for nr in _OPENS),
        *((_JEQ, f"arg{nr}", 0, nr) for nr in _BY_SECOND_ARG),
        (_RET, 0, 0, _ALLOW),
    ]
    blocks: dict[str, list[Jump]] = {
        f"open{nr}": [(_LD, 0, 0, 16 + 8 * arg), (_JSET, "deny", 0, _WRITE_FLAGS), (_RET, 0, 0, _ALLOW)] for nr, arg in _OPENS.items()
    }
    for nr, values in _BY_SECOND_ARG.items():
        blocks[f"arg{nr}"] = [(_LD, 0, 0, 24), *((_JEQ, "deny", 0, value) for value in values), (_RET, 0, 0, _ALLOW)]
    blocks |= {"deny": deny, "kill": kill}
    starts, at = {}, len(head)
    for name, block in blocks.items():
        starts[name], at = at, at + len(block)
    flat = [*head, *(insn for block in blocks.values() for insn in block)]
    resolve = lambda jump, i: starts[jump] - i - 1 if isinstance(jump, str) else jump  # noqa: E731
    return [(code, resolve(jt, i), resolve(jf, i), k) for i, (code, jt, jf, k) in enumerate(flat)]


class _Filter(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> bool:
    """Confine this process (and anything it could start) for good; False where unsupported."""
    if platform.machine() != "x86_64":
        return False
    raw = b"".join(struct.pack("HBBI", *insn) for insn in _program())
    buffer = ctypes.create_string_buffer(raw, len(raw))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    fprog = _Filter(len(raw) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    return libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0


def not_dumpable() -> None:
    """No core dumps, and no /proc/<pid>/mem or environ for processes without CAP_SYS_PTRACE in
    this process's original namespace: a sandboxed worker cannot read this process's memory."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
