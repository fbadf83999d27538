"""Commands run as an operator runs them, and their stderr read as the docs promise it: an error
is one line, never a traceback (issue 43). Disk conditions are the kernel's own, made for one
command: a small tmpfs or a read-only bind mount in a mount namespace of its own (``unshare``), a
file-size limit (RLIMIT_FSIZE), a directory without write permission for a root that lost the
capability to override it (``setpriv``)."""

from __future__ import annotations

import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).parents[1]
QUIET = ["run.tensorboard=false", "run.plot=false", "run.console=false"]
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
CLI = ["-m", "genrl_swarm.cli"]
DEMO = ["-m", "genrl_swarm.games.reasoning_gym.demo"]


@dataclass(frozen=True)
class Ended:
    """How a command ended: its status, its stderr, and how long it ran."""

    status: int
    stderr: str
    seconds: float

    def line(self) -> str:
        """The one line of stderr that is not a log record (failing the test if there is a
        traceback, or another line beside it)."""
        assert "Traceback" not in self.stderr, self.stderr[-4000:]
        lines = [x for x in self.stderr.splitlines() if x.strip() and not LOG_RECORD.match(x)]
        assert len(lines) == 1, self.stderr[-4000:]
        return lines[0]


def environment(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **extra}


def python(
    module: Sequence[str],
    args: Sequence[str],
    *,
    wrap: Sequence[str] = (),
    limit_file_size: int | None = None,
    timeout: float = 300,
) -> Ended:
    """``python <module> <args>`` (under ``wrap``, a command prefix), waited for."""
    setup: Callable[[], None] | None = None
    if limit_file_size is not None:
        size = limit_file_size  # Python ignores SIGXFSZ: a write past the limit fails with EFBIG
        setup = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))  # noqa: E731
    began = time.monotonic()
    done = subprocess.run(
        [*wrap, sys.executable, *module, *args], capture_output=True, text=True, env=environment(), timeout=timeout, preexec_fn=setup
    )
    return Ended(done.returncode, done.stderr, time.monotonic() - began)


def unshare_works() -> bool:
    """Whether this machine lets a test mount in a namespace of its own (a user namespace maps
    the caller to root there, so no privilege is needed where unprivileged namespaces are on)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    return probe.returncode == 0


def in_namespace(script: str) -> list[str]:
    """A prefix running ``script`` in a mount namespace of its own; the command is its ``"$@"``."""
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh"]


def full_disk(mount: Path, size: str, keep: Path) -> list[str]:
    """A tmpfs of ``size`` at ``mount`` for the command; what it holds afterwards is copied to ``keep``."""
    mount.mkdir(parents=True, exist_ok=True)
    m, k = shlex.quote(str(mount)), shlex.quote(str(keep))
    return in_namespace(f'mount -t tmpfs -o size={size} tmpfs {m} || exit 99; "$@"; status=$?; cp -a {m} {k}; exit $status')


def read_only(directory: Path) -> list[str]:
    """``directory`` mounted read-only for the command."""
    directory.mkdir(parents=True, exist_ok=True)
    d = shlex.quote(str(directory))
    return in_namespace(f'mount --bind {d} {d} && mount -o remount,ro,bind {d} || exit 99; exec "$@"')


def without_write_permission(directory: Path) -> list[str]:
    """``directory`` (made r-x) unwritable for the command: as root, with the capabilities that
    override file permissions dropped."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o555)
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--inh-caps=-all"]
