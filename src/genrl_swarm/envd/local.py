"""LocalEnv: the embedded default. A controller and its worker processes owned by this process,
driven from a background event-loop thread; no server, no port. Tool code still runs only in the
workers' sandboxed children, never in the calling (trainer) process."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from genrl_swarm.envd.api import EnvClient
from genrl_swarm.envd.controller import Controller, EnvdConfig
from genrl_swarm.envd.errors import EnvUnavailable
from genrl_swarm.envd.protocol import CloseRequest, Stats, StepRequest
from genrl_swarm.envd.types import Action, Reset, StepResult, TaskSpec

T = TypeVar("T")


class LocalEnv(EnvClient):
    def __init__(self, config: EnvdConfig | None = None, timeout: float = 120.0) -> None:
        self.timeout = timeout
        self.controller = Controller(config or EnvdConfig(workers=1))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="genrl-envd-local", daemon=True)
        self._thread.start()
        try:
            self._run(self.controller.start(), timeout=300.0)
        except BaseException:
            self.shutdown()
            raise

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout or self.timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise EnvUnavailable(f"the local environment did not answer within {timeout or self.timeout:g} s") from None

    def reset(self, task: TaskSpec) -> Reset:
        return self._run(self.controller.reset(task))

    def step(self, session: str, action: Action, tokens: int = 0) -> StepResult:
        return self._run(self.controller.step(StepRequest(session, action, tokens)))

    def close(self, session: str) -> bool:
        return self._run(self.controller.close(CloseRequest(session))).closed

    def stats(self) -> Stats:
        return self._run(self.controller.stats())

    def shutdown(self) -> None:
        if self._loop.is_running():
            try:
                self._run(self.controller.stop(), timeout=30.0)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(10)
