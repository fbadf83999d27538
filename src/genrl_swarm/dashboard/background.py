"""The dashboard served from a thread of this process: for tests, notebooks, or a launcher
that shows its own run. ``with Background(hub) as url:`` serves until the block ends."""

from __future__ import annotations

import threading
import time
from types import TracebackType

import uvicorn

from genrl_swarm.dashboard.hub import Hub
from genrl_swarm.dashboard.serve import bind, closing_server, is_loopback, link
from genrl_swarm.dashboard.server import create_app


class Background:
    def __init__(self, hub: Hub, host: str = "127.0.0.1", port: int = 0, token: str | None = None, start_timeout: float = 20.0) -> None:
        self.hub, self.host, self.port, self.token, self.start_timeout = hub, host, port, token, start_timeout
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> str:
        sock = bind(self.host, self.port)
        app = create_app(self.hub, token=self.token, loopback_only=is_loopback(self.host))
        self._server = closing_server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2), self.hub)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, name="dashboard", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the dashboard server did not start")
            time.sleep(0.02)
        return link(self.host, sock.getsockname()[1], self.token)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.hub.close()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
