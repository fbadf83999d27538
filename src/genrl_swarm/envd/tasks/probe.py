"""Sandbox probe: tools that misbehave on request (hang, spin, allocate, crash, reach out).

For the sandbox tests and for checking a deployment's isolation; servers offer it only when
listed in their tasks. Every tool here must be stopped by the sandbox, not by itself.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from genrl_swarm.envd.schema import Param, Tool
from genrl_swarm.envd.tasks.base import Outcome, Setup, Task, same_answer

SECONDS = Param("number", "how long", minimum=0, maximum=3600)


class Probe(Task):
    name = "probe"
    summary = "sandbox checks: tools that hang, spin, allocate, crash or reach for the network/files"
    needs_scratch = True
    tools = (
        Tool("echo", "Return the text.", {"text": Param("string", "any text", max_length=1000)}),
        Tool("sleep", "Sleep (hangs without using CPU).", {"seconds": SECONDS}),
        Tool("spin", "Busy-loop (hangs using CPU).", {"seconds": SECONDS}),
        Tool("allocate", "Allocate memory.", {"megabytes": Param("integer", "how much", minimum=0, maximum=1 << 20)}),
        Tool("crash", "Kill the process running the tool."),
        Tool("pid", "The id of the process running the tool."),
        Tool("process", "The process running the tool, unique across PID namespaces: 'pid:[inode]:pid'."),
        Tool("environ", "The names of the environment variables the tool sees."),
        Tool("listdir", "The names in a directory.", {"path": Param("string", "path", max_length=4096)}),
        Tool(
            "connect",
            "Open a TCP connection.",
            {"host": Param("string", "host", max_length=255), "port": Param("integer", "port", minimum=1, maximum=65535)},
        ),
        Tool("read_file", "Read a file.", {"path": Param("string", "path", max_length=4096)}),
        Tool("write_scratch", "Write a file into the scratch directory.", {"text": Param("string", "content", max_length=1000)}),
    )

    def setup(self, seed: int, scratch: Path | None) -> Setup:
        return Setup("Probe the sandbox; answer ok.", "ok")

    def call(self, tool: str, arguments: dict[str, Any], state: Any, scratch: Path | None) -> Outcome:
        if tool == "sleep":
            time.sleep(arguments["seconds"])
        elif tool == "spin":
            end = time.monotonic() + arguments["seconds"]
            while time.monotonic() < end:
                pass
        elif tool == "allocate":
            return Outcome(f"allocated {len(bytearray(arguments['megabytes'] << 20)) >> 20} MiB")
        elif tool == "pid":
            return Outcome(str(os.getpid()))
        elif tool == "process":
            return Outcome(f"{os.readlink('/proc/self/ns/pid')}:{os.getpid()}")
        elif tool == "environ":
            return Outcome(" ".join(sorted(os.environ)))
        elif tool == "listdir":
            return Outcome(" ".join(sorted(os.listdir(arguments["path"])))[:1000])
        elif tool == "crash":
            os.abort()
        elif tool == "connect":
            with socket.create_connection((arguments["host"], arguments["port"]), timeout=2):
                return Outcome("connected")
        elif tool == "read_file":
            return Outcome(Path(arguments["path"]).read_text()[:200])
        elif tool == "write_scratch":
            assert scratch is not None
            (scratch / "note.txt").write_text(arguments["text"])
            return Outcome(f"wrote {scratch / 'note.txt'}")
        return Outcome(arguments.get("text", "done"))

    def reward(self, answer: str, truth: str, state: Any) -> float:
        return float(same_answer(answer, truth))
