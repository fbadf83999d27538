"""The envd gRPC server: grpc.aio with generic handlers over msgspec structs (no generated code).

Each method decodes its request with its struct's bounds (and under ``MAX_REQUEST_BYTES``), asks
the controller, and encodes the reply. Every failure is a status with a sentence: bad bytes
``INVALID_ARGUMENT``, a gone session ``NOT_FOUND``, a lost one ``ABORTED``, a full server
``RESOURCE_EXHAUSTED``. No authentication or TLS: bind to loopback or a private network.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import msgspec

from genrl_swarm.envd.controller import Controller, EnvdConfig
from genrl_swarm.envd.errors import EnvError
from genrl_swarm.envd.protocol import MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES, METHODS, SERVICE, STATUS
from genrl_swarm.envd.tasks import TASKS

log = logging.getLogger(__name__)


def _handler(name: str, act: Callable[[Any], Awaitable[Any]]) -> grpc.RpcMethodHandler:
    decode: Callable[[bytes], Any] = msgspec.msgpack.Decoder(METHODS[name][0]).decode
    encode = msgspec.msgpack.Encoder().encode

    async def handle(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            parsed = decode(request)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad {name} request: {e}")
        try:
            return encode(await act(parsed))
        except EnvError as e:
            await context.abort(grpc.StatusCode[STATUS[e.kind]], str(e))
        except Exception as e:  # noqa: BLE001 - a bug answers INTERNAL for this request; the server stays up
            log.exception("envd %s failed", name)
            await context.abort(grpc.StatusCode.INTERNAL, f"envd {name} failed: {type(e).__name__}: {e}")
        raise AssertionError("unreachable: abort raises")

    return grpc.unary_unary_rpc_method_handler(handle)


class EnvServer:
    """A controller behind a gRPC port. ``start`` returns the bound port (pass 0 for any)."""

    def __init__(self, config: EnvdConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config, self.address = config, f"{host}:{port}"
        self.controller = Controller(config)
        self.server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self) -> int:
        await self.controller.start()
        c = self.controller
        acts: dict[str, Callable[[Any], Awaitable[Any]]] = {"Reset": c.reset, "Step": c.step, "Close": c.close, "Stats": c.stats}
        self.server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
                ("grpc.max_send_message_length", MAX_RESPONSE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {n: _handler(n, a) for n, a in acts.items()}),))
        self.port = self.server.add_insecure_port(self.address)
        if self.port == 0:
            await self.controller.stop()
            raise OSError(f"envd could not bind {self.address}")
        await self.server.start()
        return self.port

    async def stop(self, grace: float = 1.0) -> None:
        if self.server is not None:
            await self.server.stop(grace)
        await self.controller.stop()


async def serve(config: EnvdConfig, host: str, port: int) -> int:
    """Run until SIGINT/SIGTERM (``genrl-swarm envd``), then stop the workers and free the port.

    Returns the shell's exit status for a stop by a signal, 128 + its number (130, 143), so a
    supervisor sees that the server was stopped, not that it finished."""
    server = EnvServer(config, host, port)
    bound = await server.start()
    stats = await server.controller.stats()
    isolation = stats.workers[0].isolation if stats.workers else "?"
    print(f"envd listening on {host}:{bound} ({config.workers} workers, at most {config.max_sessions} sessions, "
          f"ttl {config.ttl:g} s, tasks {','.join(config.host.offered())}, sandbox: {isolation})", flush=True)  # fmt: skip
    for name, why in TASKS.broken.items():
        print(f"envd: plug-in task {name!r} not offered: {why}", flush=True)
    stop: asyncio.Future[signal.Signals] = asyncio.get_running_loop().create_future()
    loop = asyncio.get_running_loop()

    def received(sig: signal.Signals) -> None:
        if not stop.done():
            stop.set_result(sig)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, received, sig)
    sig = await stop
    print(f"envd stopping ({sig.name})", flush=True)
    await server.stop()
    return 128 + int(sig)
