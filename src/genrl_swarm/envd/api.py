"""The client interface: one for every way of reaching environments, and one episode on top.

``EnvClient`` is implemented in-process (``LocalEnv``: a controller and its worker processes
owned by this process, no server) and over gRPC (``RemoteEnv``). Code written against it does
not know which it has; ``connect("local")`` or ``connect("host:port")`` picks one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from genrl_swarm.envd.errors import InvalidRequest
from genrl_swarm.envd.parsing import parse_action
from genrl_swarm.envd.protocol import Stats
from genrl_swarm.envd.types import Action, Reset, StepResult, TaskSpec


class EnvClient(ABC):
    """Sessions on an environment service. Infrastructure failures raise ``EnvError``
    subclasses; the model's mistakes never raise (they come back in ``StepResult.message``)."""

    @abstractmethod
    def reset(self, task: TaskSpec) -> Reset:
        """Start an episode: its session id, first messages, tools and limits."""

    @abstractmethod
    def step(self, session: str, action: Action, tokens: int = 0) -> StepResult:
        """Play one action (``tokens``: the episode's tokens so far, for the token limit)."""

    @abstractmethod
    def close(self, session: str) -> bool:
        """End a session early; False if there was none (finished sessions close themselves)."""

    @abstractmethod
    def stats(self) -> Stats: ...

    @abstractmethod
    def shutdown(self) -> None:
        """Release the connection (and, for LocalEnv, the worker processes)."""

    def __enter__(self) -> EnvClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


class Environment:
    """One episode at a time, gym-like: ``reset(task)`` then ``step(action or text)`` until done."""

    def __init__(self, client: EnvClient) -> None:
        self.client = client
        self.session: str | None = None

    def reset(self, task: TaskSpec) -> Reset:
        if self.session is not None:
            self.client.close(self.session)
        first = self.client.reset(task)
        self.session = first.session
        return first

    def step(self, action: Action | str, tokens: int = 0) -> StepResult:
        """An action, or raw model text (parsed with ``parse_action``)."""
        if self.session is None:
            raise InvalidRequest("call reset(task) before step")
        result = self.client.step(self.session, parse_action(action) if isinstance(action, str) else action, tokens)
        if result.done:
            self.session = None
        return result

    def close(self) -> None:
        if self.session is not None:
            self.client.close(self.session)
            self.session = None
