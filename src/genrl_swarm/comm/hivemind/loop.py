"""A private asyncio event loop in a daemon thread, with a deadline on every call.

hivemind's P2P API is asynchronous and the game loop is not. Each backend runs one loop in its
own thread (the stream handler serving this peer's payloads lives there too) and submits
coroutines to it; the caller never waits longer than the deadline it gave.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
#: What the calling thread allows on top of a coroutine's own deadline (thread hand-over).
GRACE = 1.0


class LoopThread:
    def __init__(self, name: str) -> None:
        try:
            import uvloop  # hivemind's own dependency: faster socket I/O for large payloads

            self.loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:
            self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``coro`` on the loop; TimeoutError (and the coroutine cancelled) after ``timeout``."""
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout), self.loop)
        try:
            return future.result(timeout + GRACE)
        except (concurrent.futures.TimeoutError, asyncio.TimeoutError) as e:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:.1f}s") from e

    def soon(self, callback: Any, *args: Any) -> None:
        """Schedule a plain callback on the loop from any thread (no-op once it is closed)."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(callback, *args)

    def close(self, timeout: float = 3.0) -> None:
        """Cancel what runs on the loop, stop it and join its thread (bounded)."""
        if self.loop.is_closed() or not self._thread.is_alive():
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=timeout / 2)

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(timeout)
        except (concurrent.futures.TimeoutError, asyncio.TimeoutError, RuntimeError) as e:
            log.debug("event loop did not wind down cleanly: %s", e)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()
