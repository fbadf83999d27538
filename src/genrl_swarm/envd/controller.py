"""The controller: routes sessions to worker processes, holds the session table, enforces the
session cap and the TTL, and restarts workers that die.

It runs on one asyncio loop (under the gRPC server, or in a background thread for in-process
use). A session lives on one worker; a worker that dies takes its sessions with it: their next
step raises ``SessionLost`` naming the worker, the others carry on, and the worker is restarted.
Sessions idle for ``ttl`` seconds are closed; the caller then gets ``SessionNotFound`` saying so.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import msgspec

from genrl_swarm.envd.errors import EnvError, EnvUnavailable, Overloaded, SessionLost, SessionNotFound
from genrl_swarm.envd.host import HostConfig
from genrl_swarm.envd.protocol import Closed, CloseRequest, Stats, StatsRequest, StepRequest, WorkerJob, WorkerReply, WorkerReset, rss_bytes
from genrl_swarm.envd.types import Reset, StepResult, TaskSpec
from genrl_swarm.envd.workers import WorkerLink

log = logging.getLogger(__name__)
MAX_GONE = 100_000  # ended sessions remembered, to say why a step on one fails


class EnvdConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The service: how many workers, how many sessions in all, how long an idle one lives."""

    workers: int = 2
    max_sessions: int = 10_000
    ttl: float = 600.0
    host: HostConfig = HostConfig()

    def __post_init__(self) -> None:
        if self.workers < 1 or self.max_sessions < 1 or self.ttl <= 0:
            raise ValueError("workers and max_sessions must be >= 1 and ttl > 0")

    @property
    def step_timeout(self) -> float:
        """A worker that does not answer a step by then is hung (a tool call is killed by its wall clock first)."""
        return self.host.sandbox.wall_seconds * 2 + 10.0


@dataclass(slots=True)
class Route:
    worker: WorkerLink
    last_used: float


class Controller:
    def __init__(self, config: EnvdConfig) -> None:
        self.config = config
        self.workers: list[WorkerLink] = []
        self.routes: dict[str, Route] = {}
        self.gone: OrderedDict[str, EnvError] = OrderedDict()
        self.restarts = self.lost = self.evicted = 0
        self.stopping = False
        self._background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self.workers = [WorkerLink(i, 0, self.config.host, self._on_death) for i in range(self.config.workers)]
        await asyncio.gather(*(w.start() for w in self.workers))
        self._spawn(self._sweep())

    async def stop(self) -> None:
        self.stopping = True
        for task in self._background:
            task.cancel()
        await asyncio.gather(*(w.stop() for w in self.workers))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _forget(self, session: str, why: EnvError) -> None:
        self.routes.pop(session, None)
        self.gone[session] = why
        if len(self.gone) > MAX_GONE:
            self.gone.popitem(last=False)

    def _on_death(self, link: WorkerLink, reason: str) -> None:
        if self.stopping:
            return
        log.warning("%s; restarting it (%d sessions lost)", reason, len(link.sessions))
        for session in link.sessions:
            self._forget(session, SessionLost(f"session {session} was lost: {reason}. Start a new session."))
        self.lost += len(link.sessions)
        link.sessions.clear()
        self._spawn(self._restart(link))

    async def _restart(self, dead: WorkerLink) -> None:
        while True:
            link = WorkerLink(dead.index, dead.generation + 1, self.config.host, self._on_death)
            try:
                await link.start()
            except EnvError as e:
                log.error("%s; retrying in 2 s", e)
                await asyncio.sleep(2.0)
                continue
            self.workers[dead.index] = link
            self.restarts += 1
            log.info("worker %d restarted (pid %d)", link.index, link.pid)
            return

    async def _sweep(self) -> None:
        """Close sessions idle for longer than the TTL."""
        period = min(self.config.ttl / 4, 5.0)
        while True:
            await asyncio.sleep(period)
            cutoff = time.monotonic() - self.config.ttl
            for session in [s for s, r in self.routes.items() if r.last_used < cutoff]:
                route = self.routes[session]
                self._forget(session, SessionNotFound(f"session {session} expired after {self.config.ttl:g} s without a step"))
                route.worker.sessions.discard(session)
                self.evicted += 1
                if route.worker.alive:
                    self._spawn(self._close_quietly(route.worker, session))

    async def _close_quietly(self, worker: WorkerLink, session: str) -> None:
        try:
            await worker.call(CloseRequest(session), self.config.step_timeout)
        except EnvError as e:
            log.debug("closing %s after its TTL: %s", session, e)

    # ------------------------------------------------------------------ requests
    async def _ask(self, worker: WorkerLink, job: WorkerJob) -> WorkerReply:
        reply = await worker.call(job, self.config.step_timeout)
        if reply.failure is not None:
            raise reply.failure.exception()
        return reply

    async def reset(self, spec: TaskSpec) -> Reset:
        if len(self.routes) >= self.config.max_sessions:
            raise Overloaded(f"the server holds its maximum of {self.config.max_sessions} sessions; close finished ones or retry later")
        ready = [w for w in self.workers if w.alive]
        if not ready:
            raise EnvUnavailable("no worker is running (all are restarting); retry in a few seconds")
        worker = min(ready, key=lambda w: len(w.sessions))
        session = secrets.token_hex(8)
        self.routes[session] = Route(worker, time.monotonic())  # counts against the cap while it starts
        worker.sessions.add(session)
        try:
            reply = await self._ask(worker, WorkerReset(session, spec))
        except EnvError:
            self.routes.pop(session, None)
            worker.sessions.discard(session)
            raise
        assert reply.reset is not None
        return reply.reset

    def _route(self, session: str) -> Route:
        route = self.routes.get(session)
        if route is None:
            raise self.gone.get(session) or SessionNotFound(f"no session {session} (never created, or closed or finished)")
        return route

    async def step(self, request: StepRequest) -> StepResult:
        route = self._route(request.session)
        route.last_used = time.monotonic()
        reply = await self._ask(route.worker, request)
        assert reply.step is not None
        if reply.step.done:
            self.routes.pop(request.session, None)
            route.worker.sessions.discard(request.session)
        return reply.step

    async def close(self, request: CloseRequest) -> Closed:
        route = self.routes.pop(request.session, None)
        if route is None:
            return Closed(False)
        route.worker.sessions.discard(request.session)
        reply = await self._ask(route.worker, request)
        assert reply.closed is not None
        return reply.closed

    async def stats(self, request: StatsRequest | None = None) -> Stats:
        replies = await asyncio.gather(*(self._ask(w, StatsRequest()) for w in self.workers if w.alive), return_exceptions=True)
        workers = tuple(r.stats for r in replies if isinstance(r, WorkerReply) and r.stats is not None)
        return Stats(len(self.routes), self.config.max_sessions, workers, self.restarts, self.lost, self.evicted, rss_bytes(os.getpid()))
