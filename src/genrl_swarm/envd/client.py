"""Clients of a running envd over gRPC: ``RemoteEnv`` (blocking, the EnvClient interface) and
``AsyncRemoteEnv`` (asyncio, the same methods awaited). Every call has a deadline; gRPC
statuses come back as the EnvError subclasses the server meant."""

from __future__ import annotations

from typing import Any, TypeVar

import grpc
import msgspec

from genrl_swarm.core.decoders import msgpack_decoder
from genrl_swarm.envd.api import EnvClient
from genrl_swarm.envd.errors import ERRORS, EnvError, EnvUnavailable
from genrl_swarm.envd.protocol import (
    MAX_REQUEST_BYTES,
    MAX_RESPONSE_BYTES,
    METHODS,
    SERVICE,
    STATUS,
    Closed,
    CloseRequest,
    Stats,
    StatsRequest,
    StepRequest,
)
from genrl_swarm.envd.types import Action, Reset, StepResult, TaskSpec

T = TypeVar("T")
KIND_OF = {code: kind for kind, code in STATUS.items()}
OPTIONS = [("grpc.max_receive_message_length", MAX_RESPONSE_BYTES), ("grpc.max_send_message_length", MAX_REQUEST_BYTES)]
_encode = msgspec.msgpack.Encoder().encode
_DECODERS: dict[str, msgspec.msgpack.Decoder[Any]] = {name: msgpack_decoder(types[1]) for name, types in METHODS.items()}


def as_env_error(error: grpc.RpcError, address: str) -> EnvError:
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return EnvUnavailable(f"envd at {address}: {code.name}: {details} (is `genrl-swarm envd` running there?)")
    kind = KIND_OF.get(code.name if code else "", "internal")
    return ERRORS[kind](details)


class RemoteEnv(EnvClient):
    def __init__(self, address: str, timeout: float = 30.0) -> None:
        self.address, self.timeout = address, timeout
        self.channel = grpc.insecure_channel(address, options=OPTIONS)
        self._stubs = {name: self.channel.unary_unary(f"/{SERVICE}/{name}") for name in METHODS}

    def _call(self, name: str, request: Any) -> Any:
        try:
            raw = self._stubs[name](_encode(request), timeout=self.timeout)
        except grpc.RpcError as e:
            raise as_env_error(e, self.address) from None
        return _DECODERS[name].decode(raw)

    def reset(self, task: TaskSpec) -> Reset:
        return self._call("Reset", task)  # type: ignore[no-any-return]

    def step(self, session: str, action: Action, tokens: int = 0) -> StepResult:
        return self._call("Step", StepRequest(session, action, tokens))  # type: ignore[no-any-return]

    def close(self, session: str) -> bool:
        closed: Closed = self._call("Close", CloseRequest(session))
        return closed.closed

    def stats(self) -> Stats:
        return self._call("Stats", StatsRequest())  # type: ignore[no-any-return]

    def shutdown(self) -> None:
        self.channel.close()


class AsyncRemoteEnv:
    """The EnvClient methods, awaited, on one grpc.aio channel (for many concurrent sessions)."""

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        self.address, self.timeout = address, timeout
        self.channel = grpc.aio.insecure_channel(address, options=OPTIONS)
        self._stubs = {name: self.channel.unary_unary(f"/{SERVICE}/{name}") for name in METHODS}

    async def _call(self, name: str, request: Any) -> Any:
        try:
            raw = await self._stubs[name](_encode(request), timeout=self.timeout)
        except grpc.RpcError as e:
            raise as_env_error(e, self.address) from None
        return _DECODERS[name].decode(raw)

    async def reset(self, task: TaskSpec) -> Reset:
        return await self._call("Reset", task)  # type: ignore[no-any-return]

    async def step(self, session: str, action: Action, tokens: int = 0) -> StepResult:
        return await self._call("Step", StepRequest(session, action, tokens))  # type: ignore[no-any-return]

    async def close(self, session: str) -> bool:
        return (await self._call("Close", CloseRequest(session))).closed  # type: ignore[no-any-return]

    async def stats(self) -> Stats:
        return await self._call("Stats", StatsRequest())  # type: ignore[no-any-return]

    async def shutdown(self) -> None:
        await self.channel.close()
