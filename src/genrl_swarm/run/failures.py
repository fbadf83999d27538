"""How a command ends when it cannot go on: one line on stderr and a documented exit status.

Why one place. ``genrl-swarm run``, ``swarm``, ``envd`` and the demos meet the same failures (a
recipe field, a model that does not load, a disk that refuses a write, a swarm that breaks),
raised anywhere from the main thread to a peer's hook, often wrapped on the way ("peer peer-0
failed: ..."). Each command used to catch its own few and leave the rest to tracebacks and exit
1, which a supervisor cannot tell from a bug. ``failure`` maps an exception, or any exception it
was raised from, to its line and status; ``command`` runs a command's body under that rule and
under the start's signal rule (a signal before the peers run ends the start: 130 / 143).

The statuses (docs/troubleshooting.md lists them with their lines):

====  =======================================================================================
0     done
2     the user's to fix: the recipe, a limit it sets, the model, the identity file, the run dir
3     the swarm or the network failed (no peer answered, a rank died, a port in use)
4     the coordinator (chain) failed
5     the disk refused a write (full, file-size limit, read-only, permission): nothing written
      before is lost, ``--resume`` continues from the last complete checkpoint
130   stopped by Ctrl-C (SIGINT); 143: by SIGTERM
====  =======================================================================================
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum

from genrl_swarm.comm.errors import SwarmFailure
from genrl_swarm.config import RecipeError
from genrl_swarm.coord.errors import CoordinatorError
from genrl_swarm.core.identity import IdentityError
from genrl_swarm.core.limits import LimitError
from genrl_swarm.envd.errors import CannotServe
from genrl_swarm.paradigms.lm.errors import ModelLoadError
from genrl_swarm.run.rundir import RunDirError
from genrl_swarm.run.stopping import Terminated, exit_status, terminate_like_interrupt
from genrl_swarm.run.storage import ADVICE, is_storage


class Status(IntEnum):
    """Exit statuses of every command (see the module); a signal's is 128 + its number."""

    OK = 0
    USER = 2
    SWARM = 3
    CHAIN = 4
    STORAGE = 5


#: The failure each exception type is, first match wins; storage errors are matched by errno.
KINDS: tuple[tuple[type[BaseException], str, Status], ...] = (
    (RecipeError, "recipe error", Status.USER),
    (LimitError, "recipe error", Status.USER),
    (IdentityError, "identity error", Status.USER),
    (RunDirError, "run directory error", Status.USER),
    (ModelLoadError, "model error", Status.USER),
    (SwarmFailure, "swarm failure", Status.SWARM),
    (CannotServe, "envd", Status.SWARM),
    (CoordinatorError, "coordinator error", Status.CHAIN),
)


@dataclass(frozen=True)
class Failure:
    """A failure as the operator sees it: ``genrl-swarm: <kind>: <detail>`` and a status."""

    kind: str
    detail: str
    status: Status

    def line(self) -> str:
        return f"genrl-swarm: {self.kind}: {self.detail}"


def causes(error: BaseException) -> Iterator[BaseException]:
    """``error``, then what it was raised from or while handling, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def one_line(text: str) -> str:
    return " ".join(text.split())


def storage_detail(error: OSError) -> str:
    name = errno.errorcode.get(error.errno or 0, "?")
    where = f"cannot write {error.filename}" if error.filename else "a write failed"
    return f"{where}: {error.strerror or os.strerror(error.errno or 0)} ({name}): {ADVICE[error.errno or 0]}"


def failure(error: BaseException) -> Failure | None:
    """The failure ``error`` is (or was raised from); None for a bug, which keeps its traceback."""
    for e in causes(error):
        for kind, name, status in KINDS:
            if isinstance(e, kind):
                return Failure(name, one_line(str(e)) or type(e).__name__, status)
        if isinstance(e, OSError) and is_storage(e):
            return Failure("storage error", storage_detail(e), Status.STORAGE)
    return None


def command(body: Callable[[], int], after_storage: str = "", interrupted: str = "genrl-swarm: interrupted while starting") -> int:
    """Run a command's ``body`` (which returns its status). A failure ends it with its one line
    (``after_storage`` appended to a storage error's: what continues the run) and its status; a
    signal while the body starts (before peers run, which stop by ``StopSignals``) ends it with
    the line ``interrupted`` and 130 / 143. A bug keeps its traceback."""
    try:
        with terminate_like_interrupt():
            return body()
    except KeyboardInterrupt as e:  # before the peers ran (loading, building): nothing to save
        print(interrupted, file=sys.stderr)
        return exit_status(signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT)
    except Exception as e:
        found = failure(e)
        if found is None:
            raise
        line = found.line() + (f"; {after_storage}" if after_storage and found.status is Status.STORAGE else "")
        print(line, file=sys.stderr, flush=True)
        if found.status is Status.SWARM:
            # A process group with a hung peer blocks interpreter shutdown (its destructor waits
            # on the peer), so leave at once: metrics and checkpoints are already closed on disk.
            sys.stdout.flush()
            logging.shutdown()
            os._exit(found.status)
        return int(found.status)
