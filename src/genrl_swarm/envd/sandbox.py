"""A sandboxed child process that runs task code (setups and tool calls) for one worker.

Started by the worker (``python -m genrl_swarm.envd.sandbox '<limits json>' <scratch root>``),
it serves jobs over its stdin/stdout until end of input. Before the first job it applies the limits of ``genrl_swarm.sandbox.kernel`` (memory, files, processes, network, an audit
hook; CPU time re-armed before every job, so SIGXCPU ends a spinning job), the same ones the
scorer sandbox uses.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import sys
from pathlib import Path

import msgspec

from genrl_swarm.envd.jobs import EXIT_MEMORY, Job, Reply, SandboxLimits, SetupJob
from genrl_swarm.envd.tasks import TASKS, ToolFailure
from genrl_swarm.sandbox.frames import read_frame_blocking, write_frame_blocking
from genrl_swarm.sandbox.kernel import SandboxViolation, arm_cpu, audit_hook, leave_network, set_limits

__all__ = ["SandboxViolation", "run", "serve"]


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
    networked = not leave_network() and any(name != "lo" for _, name in socket.if_nameindex())  # jailed: no unshare, no interface
    set_limits(limits.memory_mb, limits.file_mb)
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
    TASKS.load()  # and the installed plug-in tasks (their imports may read files the hook refuses)
    serve(msgspec.json.decode(sys.argv[1], type=SandboxLimits), Path(sys.argv[2]))
