"""The worker's side of the sandbox: a few long-lived children, each running one job at a time.

A child per call would cost a process start (tens of ms) on every step; a child per session
would cost a process per session (10,000 sessions). Instead each worker keeps ``size`` children
and hands every job to an idle one. Tool code is a pure function of (arguments, state), so a
child holds no session: when one dies (CPU limit, memory, crash) or overruns the wall clock, only
the job it was running fails (``SandboxDied``) and a fresh child replaces it in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import signal
import sys
from importlib.metadata import entry_points
from pathlib import Path

import msgspec

from genrl_swarm.envd.jobs import EXIT_MEMORY, Job, Reply, SandboxDied, SandboxLimits
from genrl_swarm.envd.tasks.registry import GROUP
from genrl_swarm.sandbox import jail
from genrl_swarm.sandbox.frames import pack, read_frame
from genrl_swarm.sandbox.kernel import process_cpu

log = logging.getLogger(__name__)


def plugin_modules() -> tuple[str, ...]:
    """The modules of installed plug-in tasks, so the sandbox's view holds them."""
    found = (ep.module for ep in entry_points(group=GROUP) if importlib.util.find_spec(ep.module.split(".")[0]) is not None)
    return tuple(dict.fromkeys(found))  # a broken plug-in is reported by the registry, not here


START_TIMEOUT = 60.0  # a loaded machine can take seconds to start an interpreter


def death_reason(code: int | None, limits: SandboxLimits) -> str:
    """Why a child ended, in the words a user can act on."""
    if code == -signal.SIGXCPU:
        return f"the tool used more than its {limits.cpu_seconds:g} s of CPU time"
    if code == -signal.SIGKILL:
        return "the tool was killed (out of memory or its time)"
    if code == EXIT_MEMORY:
        return f"the tool ran out of memory (limit {limits.memory_mb} MiB)"
    if code is not None and code < 0:
        return f"the tool crashed ({signal.Signals(-code).name})"
    return f"the tool's process exited (code {code})"


class Child:
    """One sandboxed process and its pipes."""

    def __init__(self, proc: asyncio.subprocess.Process, limits: SandboxLimits, isolation: str) -> None:
        self.proc, self.limits, self.isolation = proc, limits, isolation
        self._pid = proc.pid
        self._decode = msgspec.msgpack.Decoder(Reply).decode

    @property
    def pid(self) -> int:
        """The tool process itself (under bwrap, its grandchild), for its CPU clock."""
        return self._pid

    @classmethod
    async def start(cls, limits: SandboxLimits, root: Path) -> Child:
        """A child in the kernel's sandbox (``sandbox.jail``: its own namespaces, a read-only view
        of the interpreter and the task packages plus ``root`` writable, an empty environment, no
        terminal) where the kernel allows it; elsewhere unjailed, and its isolation says so."""
        argv = [sys.executable, "-P", "-m", "genrl_swarm.envd.sandbox", msgspec.json.encode(limits).decode(), str(root)]
        view, jailed = jail.view_for(("genrl_swarm", *plugin_modules()), writable=(str(root),)), not jail.probe()
        env = {} if jailed else jail.environment(view)  # never a variable of the peer's
        argv = jail.command(view, argv) if jailed else argv
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env)
        assert proc.stdout is not None
        try:
            hello = msgspec.msgpack.decode(await asyncio.wait_for(read_frame(proc.stdout), START_TIMEOUT), type=Reply)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            proc.kill()
            await proc.wait()
            raise SandboxDied(f"a sandbox process did not start ({type(e).__name__}, code {proc.returncode})") from None
        child = cls(proc, limits, f"jailed, {hello.message}" if jailed else f"NOT JAILED ({jail.probe()}), {hello.message}")
        child._pid = jail.leaf_pid(proc.pid) if jailed else proc.pid
        return child

    async def run(self, payload: bytes) -> Reply:
        """One job; SandboxDied if the child dies or overruns the wall clock (it is then dead)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(pack(payload))
            return self._decode(await asyncio.wait_for(read_frame(self.proc.stdout), self.limits.wall_seconds))
        except asyncio.TimeoutError:
            self.kill()
            await self.proc.wait()
            raise SandboxDied(f"the tool did not finish within {self.limits.wall_seconds:g} s") from None
        except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError):
            raise SandboxDied(death_reason(jail.exit_code(await self.proc.wait()), self.limits)) from None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()


class SandboxPool:
    """``size`` children of one worker; ``run`` waits for an idle one."""

    def __init__(self, size: int, limits: SandboxLimits, root: Path) -> None:
        self.size, self.limits, self.root = size, limits, root
        self._idle: asyncio.Queue[Child] = asyncio.Queue()
        self._all: set[Child] = set()
        self._encode = msgspec.msgpack.Encoder().encode
        self.isolation = "?"
        self.deaths = 0
        self.closing = False  # no replacements once closing (the scratch root is going away)

    async def start(self) -> None:
        for child in await asyncio.gather(*(Child.start(self.limits, self.root) for _ in range(self.size))):
            self._add(child)

    def _add(self, child: Child) -> None:
        self._all.add(child)
        self.isolation = child.isolation
        self._idle.put_nowait(child)

    async def _replace(self) -> None:
        while not self.closing:
            try:
                self._add(await Child.start(self.limits, self.root))
                return
            except SandboxDied as e:
                log.error("%s; retrying in 1 s", e)
                await asyncio.sleep(1.0)

    async def run(self, job: Job) -> tuple[Reply, float]:
        """Run ``job`` in an idle child: its reply and the CPU seconds the child spent on it (read
        from /proc, for charging whoever the job was for). SandboxDied when the child died running
        it (its ``cpu_seconds``: what the child had spent)."""
        child = await self._idle.get()
        before = process_cpu(child.pid)
        try:
            reply = await child.run(self._encode(job))
            after = process_cpu(child.pid)
        except SandboxDied as e:
            e.cpu_seconds = self.limits.cpu_seconds  # it died: assume it spent its allowance
            self._all.discard(child)
            self.deaths += 1
            if not self.closing:
                asyncio.get_running_loop().create_task(self._replace())
            raise
        self._idle.put_nowait(child)
        return reply, (after - before) if before is not None and after is not None else 0.0

    async def close(self) -> None:
        self.closing = True
        for child in self._all:
            child.kill()
        await asyncio.gather(*(c.proc.wait() for c in self._all))
        self._all.clear()
