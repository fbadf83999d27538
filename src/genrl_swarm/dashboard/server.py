"""The Starlette app: the page, its assets, the snapshot as JSON and as a server-sent event stream.

Routes: ``/`` (the built page), ``/assets/...`` (its script and style), ``/api/snapshot``
(the current snapshot, for scripts and tests), ``/api/metric?key=K`` (one of the snapshot's
``metrics`` keys: its curves per peer and per run's mean; any other key is a 404) and ``/api/events`` (``text/event-stream``: the
snapshot now and after every change; the page never reloads). Every route is behind ``Guard``.
At most ``max_streams`` event streams are open at once, so idle tabs cannot exhaust the server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from genrl_swarm.dashboard.guard import ASGIApp, Guard, Receive, Scope, Send
from genrl_swarm.dashboard.hub import Hub

STATIC = Path(str(resources.files("genrl_swarm.dashboard") / "static"))
NO_STORE = {"cache-control": "no-store"}


def create_app(hub: Hub, token: str | None = None, loopback_only: bool = True, max_streams: int = 32) -> Guard:
    if not (STATIC / "index.html").exists():
        raise FileNotFoundError(f"{STATIC / 'index.html'} is missing: build the front end with scripts/build_dashboard.py")
    streams = 0

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=NO_STORE)

    async def current(request: Request) -> Response:
        return Response(hub.payload, media_type="application/json", headers=NO_STORE)

    async def metric(request: Request) -> Response:
        key = request.query_params.get("key", "")
        payload = await asyncio.to_thread(hub.metric, key)
        if payload is None:
            return PlainTextResponse("unknown metric: pick one of the snapshot's metrics", status_code=404, headers=NO_STORE)
        return Response(payload, media_type="application/json", headers=NO_STORE)

    async def events(scope: Scope, receive: Receive, send: Send) -> None:
        """An ASGI app rather than a handler: the count must drop however the stream ends."""
        nonlocal streams
        if streams >= max_streams:
            await PlainTextResponse(f"too many open streams (max {max_streams})", status_code=503)(scope, receive, send)
            return
        streams += 1
        try:
            request = Request(scope, receive)
            response = StreamingResponse(
                hub.stream(request.is_disconnected), media_type="text/event-stream", headers=NO_STORE | {"x-accel-buffering": "no"}
            )
            await response(scope, receive, send)
        finally:
            streams -= 1

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(hub.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    routes = [
        Route("/", index),
        Route("/api/snapshot", current),
        Route("/api/metric", metric),
        Route("/api/events", _Asgi(events)),
        Mount("/assets", StaticFiles(directory=STATIC / "assets"), name="assets"),
    ]
    return Guard(Starlette(routes=routes, lifespan=lifespan), token, loopback_only)


class _Asgi:
    """Marks a function as a raw ASGI app for Starlette's router (which calls plain functions
    with a Request)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
