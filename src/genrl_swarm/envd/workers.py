"""The controller's handle on one worker process: start it, send it requests, notice its death.

Requests are multiplexed over one socketpair with ids; each waits for its reply under a deadline.
When the worker dies (killed, crashed, or hung past a deadline and then killed), every request in
flight fails with ``SessionLost`` and ``on_death`` tells the controller, which restarts it. A reply
that is well framed but fails validation fails only the request it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import sys
from collections.abc import Callable

import msgspec

from genrl_swarm.envd.errors import EnvError, SessionLost
from genrl_swarm.envd.host import HostConfig
from genrl_swarm.envd.protocol import HELLO, Frame, WorkerJob, WorkerReply
from genrl_swarm.sandbox.frames import FrameError, pack, read_frame

log = logging.getLogger(__name__)
START_TIMEOUT = 120.0  # interpreter + sandbox children on a loaded machine


class _ReplyId(msgspec.Struct):
    """Just the request id of a reply that failed validation."""

    id: int


class WorkerLink:
    """One generation of worker ``index``; a restart makes a new link."""

    def __init__(self, index: int, generation: int, config: HostConfig, on_death: Callable[[WorkerLink, str], None]) -> None:
        self.index, self.generation, self.config, self.on_death = index, generation, config, on_death
        self.sessions: set[str] = set()
        self.pending: dict[int, asyncio.Future[WorkerReply]] = {}
        self.ids = itertools.count()
        self.alive = False
        self.proc: asyncio.subprocess.Process | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._encode, self._decode = msgspec.msgpack.Encoder().encode, msgspec.msgpack.Decoder(WorkerReply).decode
        self._decode_id = msgspec.msgpack.Decoder(_ReplyId).decode

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    async def start(self) -> None:
        mine, theirs = socket.socketpair()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "genrl_swarm.envd.worker", str(theirs.fileno()), msgspec.json.encode(self.config).decode(),
                pass_fds=(theirs.fileno(),),
            )  # fmt: skip
        finally:
            theirs.close()
        reader, self._writer = await asyncio.open_unix_connection(sock=mine)
        try:
            hello = await asyncio.wait_for(read_frame(reader), START_TIMEOUT)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            self.kill()
            code = await self.proc.wait()
            why = f"did not start within {START_TIMEOUT:g} s" if isinstance(e, asyncio.TimeoutError) else "exited while starting (see its log above)"
            raise EnvError(f"worker {self.index} {why}, exit code {code}") from None
        if hello != HELLO:
            raise EnvError(f"worker {self.index} said {hello[:40]!r} instead of hello")
        self.alive = True
        self._reader_task = asyncio.get_running_loop().create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                frame = await read_frame(reader)
                try:
                    reply = self._decode(frame)
                except msgspec.ValidationError as e:  # well-formed, but off the wire's bounds: fail only that request
                    self._reject(frame, e)
                    continue
                future = self.pending.pop(reply.id, None)
                if future is not None and not future.done():
                    future.set_result(reply)
        except (asyncio.IncompleteReadError, ConnectionError, FrameError, msgspec.DecodeError) as e:
            await self._died(f"its connection ended ({type(e).__name__})")

    def _reject(self, frame: bytes, error: msgspec.ValidationError) -> None:
        """A reply that fails validation fails the request it answers; the worker and its other
        sessions carry on. Without a readable request id the stream itself is broken (re-raised)."""
        try:
            request_id = self._decode_id(frame).id
        except msgspec.DecodeError:
            raise error from None
        log.warning("worker %d (pid %d) sent an invalid reply to request %d: %s", self.index, self.pid, request_id, error)
        future = self.pending.pop(request_id, None)
        if future is not None and not future.done():
            future.set_exception(
                EnvError(
                    f"worker {self.index} sent an invalid reply to this request ({error}); only this request failed, retry or start a new session"
                )
            )

    async def _died(self, why: str) -> None:
        if not self.alive:
            return
        self.alive = False
        self.kill()
        code = await self.proc.wait() if self.proc else None
        reason = f"worker {self.index} (pid {self.pid}) died: {why}, exit code {code}"
        for future in self.pending.values():
            if not future.done():
                future.set_exception(SessionLost(f"{reason}; its sessions are lost, start a new one"))
        self.pending.clear()
        self.on_death(self, reason)

    async def call(self, job: WorkerJob, timeout: float) -> WorkerReply:
        """Send ``job`` and wait for the reply; SessionLost if the worker dies or hangs past ``timeout``."""
        if not self.alive or self._writer is None:
            raise SessionLost(f"worker {self.index} is not running")
        request_id = next(self.ids)
        future = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        self._writer.write(pack(self._encode(Frame(request_id, job))))
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.TimeoutError:
            await self._died(f"no answer within {timeout:g} s (killed as hung)")
            return await future  # raises the SessionLost set by _died

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    async def stop(self) -> None:
        self.alive = False
        if self._writer is not None:
            self._writer.close()
        if self.proc is not None:
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except asyncio.TimeoutError:
                self.kill()
                await self.proc.wait()
        if self._reader_task is not None:
            self._reader_task.cancel()
