"""Write errors that are the disk's, not the program's: which they are, and the file they hit.

Why a module. A run writes in many places (metrics rows, events, TensorBoard, checkpoints through
each component's own ``save``) and the disk can refuse any of them: full (ENOSPC, EDQUOT), a
file-size limit (EFBIG, ``ulimit -f``), read-only (EROFS), not ours (EACCES, EPERM). An operator
needs the file and the reason in one line; Python's ``OSError`` from a failed ``write`` or
``close`` names no file, and libraries that write through C (torch's zip writer, safetensors)
raise a ``RuntimeError`` that names no errno. ``writing`` adds the file to the first kind;
``saving`` recognises the second kind from the state of the disk after the fact (``explain``).
"""

from __future__ import annotations

import errno
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Each errno that means "this disk refused the write", with what the operator can do about it.
ADVICE: dict[int, str] = {
    errno.ENOSPC: "the disk is full: free space there, or give run.dir another disk",
    errno.EDQUOT: "the disk quota is used up: free space there, or raise the quota",
    errno.EFBIG: "a file reached this process's file-size limit (ulimit -f): raise the limit",
    errno.EROFS: "the file system is read-only: give run.dir a writable place",
    errno.EACCES: "permission denied: let this user write there, or give run.dir another place",
    errno.EPERM: "permission denied: let this user write there, or give run.dir another place",
}

#: Free space below which a write that failed without an errno is taken for a full disk: more
#: than any one write of ours needs, far less than any disk a run can use holds.
NEARLY_FULL = 16 << 20


def is_storage(error: BaseException) -> bool:
    """Whether ``error`` is the disk refusing a write (see ``ADVICE``)."""
    return isinstance(error, OSError) and error.errno in ADVICE


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Name ``path`` in an OSError raised inside that names no file (a failed write or close)."""
    try:
        yield
    except OSError as e:
        if e.filename is None and e.errno is not None:  # an OSError(message) of a program's own keeps its text
            e.filename = str(path)
        raise


@contextmanager
def saving(directory: Path, named: Path | None = None) -> Iterator[None]:
    """Writes into ``directory`` by code that may lose the errno (a model's ``save_pretrained``,
    torch.save): an error the disk explains is raised as that OSError, naming ``named`` (what the
    operator knows the files by; ``directory`` itself by default)."""
    try:
        yield
    except Exception as e:
        cause = explain(directory, e)
        if cause is None:
            raise
        raise OSError(cause.errno, cause.strerror, str(named or directory)) from e


def explain(directory: Path, error: BaseException) -> OSError | None:
    """The disk's reason for ``error``, raised while writing into ``directory`` by code that lost
    the errno (torch.save, safetensors): ENOSPC when the disk is nearly full, EFBIG when a file
    there reached the file-size limit; None when the disk does not explain it."""
    if isinstance(error, OSError):
        return error if is_storage(error) else None
    try:
        disk = os.statvfs(directory)
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        biggest = max((p.stat().st_size for p in directory.rglob("*") if p.is_file()), default=0)
    except OSError:
        return None
    if limit != resource.RLIM_INFINITY and biggest >= limit:
        return OSError(errno.EFBIG, os.strerror(errno.EFBIG), str(directory))
    if disk.f_bavail * disk.f_frsize < NEARLY_FULL:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory))
    return None
