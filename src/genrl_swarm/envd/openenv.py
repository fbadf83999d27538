"""OpenEnv both ways: envd's tasks served as an OpenEnv environment, and any OpenEnv environment
as an ``EnvClient`` (so as a task a policy plays). Needs the ``openenv`` extra (openenv-core).

OpenEnv (openenv-core) speaks reset/step/state over a WebSocket (``/ws``, one environment
instance per connection) and HTTP. Its types are pydantic models; ours are msgspec structs.
Both directions convert at one place each and check with our own types:

- **Served** (``EnvdEnvironment``, ``genrl-swarm envd --openenv``): each OpenEnv session is one
  envd session. ``reset(task=..., seed=...)`` starts it; a step's action is either the model's
  raw text (``text``: parsed by ``parse_action``, as a plain LLM client would send) or our typed
  action (``action``: ``Action``'s msgspec form, ``{"type": "call", "name": ..., "arguments": ...}``);
  observations carry our messages and tools. The tool code still runs only in envd's sandboxed
  worker children.
- **Client** (``OpenEnvClient``): ``ActionFormat.ENVD`` talks to the server above, loss-free (the
  same actions and messages). ``ActionFormat.TOOL`` drives any other OpenEnv environment: the
  model sees one tool (``tool``) whose arguments are the environment's action, and each
  observation comes back as a tool message holding its JSON; an answer is sent as
  ``{answer_field: text}``, or, without one, ends the episode with the reward so far.

What reads the other side's bytes. Served: an OpenEnv client's JSON is read by openenv-core's
own server stack (FastAPI, pydantic, websockets), then only by our parser and our msgspec types;
the text never reaches a tokenizer or any other library here. Client: the environment the
operator named is read by openenv-core's client (websockets, ``json``); its observation is then
checked into our ``Message`` (roles, sizes: ``MAX_TEXT``) before anything else sees it. Every
call has a deadline (``timeout``). The environment is a party the operator chose, as a remote
``genrl-swarm envd`` is: its text is rendered by the policy's tokenizer like any environment's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import json
import math
import secrets
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from openenv.core.env_server.interfaces import Environment as OpenEnvEnvironment
from openenv.core.env_server.types import Action as OpenEnvAction
from openenv.core.env_server.types import Observation as OpenEnvObservation
from openenv.core.env_server.types import State as OpenEnvState
from openenv.core.generic_client import GenericEnvClient
from pydantic import Field

from genrl_swarm.core.decoders import warm
from genrl_swarm.envd.api import EnvClient
from genrl_swarm.envd.controller import EnvdConfig
from genrl_swarm.envd.errors import EnvError, EnvUnavailable, InvalidRequest, SessionNotFound
from genrl_swarm.envd.parsing import parse_action
from genrl_swarm.envd.protocol import Stats
from genrl_swarm.envd.types import MAX_TEXT, Action, Answer, FinishReason, Limits, Message, Reset, StepResult, TaskSpec, ToolCall

T = TypeVar("T")
MAX_BYTES = 1 << 20  # what a TOOL-format episode may exchange, as our Limits count it


# --------------------------------------------------------------------------- served
class EnvdAction(OpenEnvAction):
    """One model turn: its raw text, or our typed action. ``tokens``: the episode's tokens so far."""

    text: str = Field(default="", max_length=MAX_TEXT)
    action: dict[str, Any] | None = None
    tokens: int = Field(default=0, ge=0)


class EnvdObservation(OpenEnvObservation):
    """The messages this reset or step added (all first messages; then one), the tools, and how it ended."""

    messages: list[dict[str, str]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    limits: dict[str, int] | None = None  # at reset
    finish_reason: str | None = None
    turn: int = 0


class EnvdEnvironment(OpenEnvEnvironment[EnvdAction, EnvdObservation, OpenEnvState]):
    """An OpenEnv environment whose episodes are envd sessions on ``client``."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # every instance holds its own envd session

    def __init__(self, client: EnvClient) -> None:
        super().__init__()
        self.client, self.session, self._state = client, "", OpenEnvState()

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, task: str = "calculator", max_turns: int = 0, max_tokens: int = 0, **_: Any
    ) -> EnvdObservation:
        spec = msgspec.convert({"task": task, "seed": seed or 0, "max_turns": max_turns, "max_tokens": max_tokens}, TaskSpec)
        self.close()
        first = self.client.reset(spec)
        self.session, self._state = first.session, OpenEnvState(episode_id=episode_id or first.session)
        return EnvdObservation(messages=[m.to_chat() for m in first.messages], tools=list(first.tools), limits=msgspec.to_builtins(first.limits))

    def step(self, action: EnvdAction, timeout_s: float | None = None, **_: Any) -> EnvdObservation:
        if not self.session:
            raise InvalidRequest("call reset before step")
        ours = parse_action(action.text) if action.action is None else msgspec.convert(action.action, Action)  # type: ignore[arg-type]
        result = self.client.step(self.session, ours, action.tokens)
        self._state.step_count += 1
        if result.done:
            self.session = ""
        return EnvdObservation(
            messages=[result.message.to_chat()], done=result.done, reward=result.reward, finish_reason=result.finish_reason, turn=result.turn
        )

    @property
    def state(self) -> OpenEnvState:
        return self._state

    def close(self) -> None:
        if self.session:
            self.client.close(self.session)
            self.session = ""


def openenv_app(client: EnvClient, max_sessions: int = 64) -> Any:
    """openenv-core's FastAPI app (WebSocket ``/ws``, HTTP ``/reset``, ``/step``, ``/state``, ``/schema``) on ``client``."""
    from openenv.core.env_server.http_server import create_fastapi_app

    return create_fastapi_app(lambda: EnvdEnvironment(client), EnvdAction, EnvdObservation, max_concurrent_envs=max_sessions)


def serve_openenv(config: EnvdConfig, host: str, port: int) -> None:
    """``genrl-swarm envd --openenv``: envd's controller in this process, openenv-core's app in
    front (uvicorn), until interrupted. Prints the bound address, as the gRPC server does."""
    import signal
    import socket

    import uvicorn

    from genrl_swarm.envd.local import LocalEnv

    def stop(*_: Any) -> None:
        raise SystemExit(0)  # uvicorn re-raises SIGTERM after its graceful shutdown: a clean exit, workers stopped

    signal.signal(signal.SIGTERM, stop)
    sock = socket.create_server((host, port))
    with LocalEnv(config) as client:
        server = uvicorn.Server(uvicorn.Config(openenv_app(client, config.max_sessions), log_level="warning"))
        print(f"genrl-swarm envd: OpenEnv on ws://{host}:{sock.getsockname()[1]}/ws", flush=True)
        server.run(sockets=[sock])


# --------------------------------------------------------------------------- client
class ActionFormat(enum.Enum):
    ENVD = "envd"  # the server is envd's own (``genrl-swarm envd --openenv``): actions and messages as they are
    TOOL = "tool"  # any OpenEnv environment: one tool whose arguments are its action


class _Reply(msgspec.Struct, frozen=True):
    """What an OpenEnv server answered a reset or step with, as openenv-core's client parsed it."""

    observation: dict[str, Any]
    reward: float | bool | None = None
    done: bool = False


class _EnvdObservation(msgspec.Struct, frozen=True):
    """envd's OpenEnv observation (``EnvdObservation``), checked with our own types."""

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    limits: Limits | None = None
    finish_reason: FinishReason | None = None


warm(TaskSpec, Action, _Reply, _EnvdObservation)  # converted from several threads at once (core.decoders)


def _checked(got: Any, envd: bool) -> tuple[_Reply, _EnvdObservation | None]:
    """A reply in our types, or a one-line ``InvalidRequest``: a server's bytes are checked
    (shape, roles, sizes, a finite reward) before anything else reads them."""
    try:
        reply = msgspec.convert({"observation": got.observation, "reward": got.reward, "done": got.done}, _Reply)
        obs = msgspec.convert(reply.observation, _EnvdObservation) if envd else None
    except msgspec.ValidationError as e:
        raise InvalidRequest(f"the OpenEnv server sent a malformed reply: {str(e)[:200]}") from None
    if not math.isfinite(float(reply.reward or 0.0)):
        raise InvalidRequest(f"the OpenEnv server sent a reward of {reply.reward!r}")
    return reply, obs


@dataclass
class _Episode:
    client: GenericEnvClient
    max_turns: int
    turns: int = 0
    reward: float = 0.0


@dataclass
class OpenEnvClient(EnvClient):
    """An OpenEnv server as envd sessions (see the module). ``parameters``: the JSON schema of the
    TOOL-format action, as the model is shown it (the operator's, not fetched from the server)."""

    base_url: str
    format: ActionFormat = ActionFormat.ENVD
    tool: str = "step"
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    answer_field: str = ""
    max_turns: int = 8
    timeout: float = 30.0
    _episodes: dict[str, _Episode] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="genrl-openenv", daemon=True)
        self._thread.start()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(self.timeout + 5.0)
        except (concurrent.futures.TimeoutError, asyncio.TimeoutError):
            future.cancel()
            raise EnvUnavailable(f"the OpenEnv server at {self.base_url} did not answer within {self.timeout:g} s") from None
        except (ConnectionError, OSError) as e:
            raise EnvUnavailable(f"OpenEnv server at {self.base_url}: {str(e)[:200]}") from None
        except RuntimeError as e:  # openenv-core's client: the server answered with an error
            raise InvalidRequest(f"OpenEnv server at {self.base_url}: {str(e)[:200]}") from None

    def reset(self, task: TaskSpec) -> Reset:
        client = GenericEnvClient(self.base_url, connect_timeout_s=self.timeout, message_timeout_s=self.timeout)
        envd = self.format is ActionFormat.ENVD
        try:
            first, obs = _checked(self._run(client.reset(**(msgspec.to_builtins(task) if envd else {"seed": task.seed}))), envd)
            if envd and (obs is None or obs.limits is None):
                raise InvalidRequest("the OpenEnv server's reset named no limits: is it genrl-swarm envd --openenv?")
        except EnvError:
            with contextlib.suppress(EnvError):
                self._run(client.close())
            raise
        session, turns = secrets.token_hex(8), task.max_turns or self.max_turns
        self._episodes[session] = _Episode(client, turns)
        if obs is not None and obs.limits is not None:
            return Reset(session, task.task, obs.messages, obs.tools, obs.limits)
        tool = {"type": "function", "function": {"name": self.tool, "description": "act in the environment", "parameters": self.parameters}}
        return Reset(session, task.task, (self._observed(first.observation, "user"),), (tool,), Limits(turns, task.max_tokens or 1 << 20, MAX_BYTES))

    def _observed(self, observation: Any, role: str) -> Message:
        """The environment's observation as one message: its JSON, cut to ``MAX_TEXT``."""
        text = json.dumps(observation, sort_keys=True, ensure_ascii=False, default=str)[:MAX_TEXT]
        return Message(role, text, name=self.tool if role == "tool" else "")  # type: ignore[arg-type]

    def step(self, session: str, action: Action, tokens: int = 0) -> StepResult:
        ep = self._episodes.get(session)
        if ep is None:
            raise SessionNotFound(f"no OpenEnv session {session[:16]!r}")
        ep.turns += 1
        if self.format is ActionFormat.ENVD:
            reply, obs = _checked(self._run(ep.client.step({"action": msgspec.to_builtins(action), "tokens": tokens})), envd=True)
            if obs is None or len(obs.messages) != 1:
                raise InvalidRequest("the OpenEnv server's step did not answer with one message")
            result = StepResult(obs.messages[0], reply.done, float(reply.reward or 0.0), obs.finish_reason, ep.turns)
        else:
            result = self._tool_step(ep, action)
        if not result.done and ep.turns >= ep.max_turns and self.format is ActionFormat.TOOL:  # envd's server keeps its own
            result = msgspec.structs.replace(result, done=True, finish_reason="turn_limit", reward=ep.reward)
        if result.done:
            self.close(session)
        return result

    def _tool_step(self, ep: _Episode, action: Action) -> StepResult:
        if isinstance(action, Answer) and not self.answer_field:
            return StepResult(Message("user", "answer received"), True, ep.reward, "answer", ep.turns)
        if isinstance(action, ToolCall) and action.name == self.tool:
            payload = dict(action.arguments)
        elif isinstance(action, Answer):
            payload = {self.answer_field: action.text}
        else:
            why = action.message if not isinstance(action, ToolCall) else f"unknown tool {action.name!r}: call {self.tool!r}"
            return StepResult(Message("tool", why[:MAX_TEXT], name=self.tool), False, 0.0, None, ep.turns)
        try:
            got = self._run(ep.client.step(payload))
        except InvalidRequest as e:  # the environment refused the action (its validation): the model's mistake
            return StepResult(Message("tool", str(e)[:MAX_TEXT], name=self.tool), False, 0.0, None, ep.turns)
        reply, _ = _checked(got, envd=False)
        ep.reward += float(reply.reward or 0.0)
        done = reply.done
        return StepResult(self._observed(reply.observation, "tool"), done, ep.reward if done else 0.0, "answer" if done else None, ep.turns)

    def close(self, session: str) -> bool:
        ep = self._episodes.pop(session, None)
        if ep is None:
            return False
        with contextlib.suppress(EnvError):  # already gone: closing is best effort, the server reaps idle sessions
            self._run(ep.client.close())
        return True

    def stats(self) -> Stats:
        return Stats(len(self._episodes), 0, (), 0, 0, 0, 0)

    def shutdown(self) -> None:
        for session in list(self._episodes):
            self.close(session)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
