"""The environment side of an episode: one code path for playing it and for replaying a peer's.

``Session.turn`` takes the model's ids for one turn, steps the environment with the action they
parse to, and appends what the environment answered. The policy calls it with freshly sampled
ids; ``replay`` calls it with the ids of a received episode and checks that every id the
sender attributes to the environment (prompt, tool results) is what this peer's own
environment produces from the task's seed. The reward is always the one this peer's
environment gives: an episode carries no reward, and one whose tool results do not replay is
refused (``ReplayMismatch``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from genrl_swarm.core import meter
from genrl_swarm.core.limits import LimitError
from genrl_swarm.core.meter import CutOff
from genrl_swarm.envd.api import EnvClient
from genrl_swarm.envd.errors import EnvUnavailable, SessionLost, SessionNotFound
from genrl_swarm.envd.parsing import parse_action
from genrl_swarm.envd.protocol import Stats
from genrl_swarm.envd.types import Action, FinishReason, Reset, StepResult, TaskSpec
from genrl_swarm.paradigms.agents.bodies import Episode
from genrl_swarm.paradigms.agents.chat import ChatRenderer, Conversation

#: Infrastructure failures of one session while acting: they end that episode (``error``), not the peer.
LOST = (SessionLost, SessionNotFound, EnvUnavailable)


class ReplayMismatch(ValueError):
    """A received episode that this peer's environment does not reproduce."""


def task_spec(fields: Mapping[str, Any]) -> TaskSpec:
    """The episode a task (or its stage input's context) names: kind, seed and limits."""
    return TaskSpec(str(fields["task"]), int(fields["seed"]), int(fields.get("max_turns", 0)), int(fields.get("max_tokens", 0)))


def prefills(fields: Mapping[str, Any]) -> tuple[str, ...]:
    """The scaffold written ahead of each model turn (``chat.Conversation``), from the task's
    public fields (so sender and receiver use the same); none by default."""
    return tuple(str(p) for p in fields.get("prefill", ()))


@dataclass
class Session:
    """One episode in progress on an environment session."""

    env: EnvClient
    spec: TaskSpec
    session: str
    conversation: Conversation
    max_tokens: int
    done: bool = False
    finish_reason: FinishReason = "token_limit"
    reward: float = 0.0
    sources: list[str] = field(default_factory=list)  # which policy generated each model turn

    @classmethod
    def start(cls, env: EnvClient, spec: TaskSpec, renderer: ChatRenderer, prefill: Sequence[str] = ()) -> Session:
        first = env.reset(spec)
        s = cls(env, spec, first.session, renderer.start(first.messages, first.tools, prefill), first.limits.max_tokens)
        if s.budget <= 0:  # a prompt over the limit: the episode is over before it starts
            s.stop()
        return s

    @property
    def budget(self) -> int:
        """Model tokens the episode may still add (the token limit counts every id)."""
        return self.max_tokens - len(self.conversation.ids)

    def turn(self, ids: Sequence[int], logprobs: Sequence[float], source: str = "own", tolerant: bool = False) -> None:
        """Play the model's turn; record the environment's answer (or the end). ``tolerant``
        (acting): a lost session or an unreachable service ends this episode as ``error`` (its
        model turns so far are kept) instead of raising; replaying raises (a receiver's own
        infrastructure failure is never the sender's fault)."""
        conv = self.conversation
        text = conv.reply(ids, logprobs)
        self.sources.append(source)
        try:
            result = self.env.step(self.session, parse_action(text), len(conv.ids))
        except LOST:
            if not tolerant:
                raise
            self.done, self.finish_reason, self.reward = True, "error", 0.0
            return
        if result.done:
            self.done, self.finish_reason, self.reward = True, result.finish_reason or "error", result.reward
            return
        conv.respond([result.message])
        if self.budget <= 0:  # the environment ends only past the limit; no room for another turn
            self.stop()

    def check_room(self, max_new_tokens: int) -> None:
        """Raise LimitError when the prompt leaves the model no token: the episode would end
        before its first turn, and a run of such episodes trains on nothing, silently."""
        if self.budget > 0:
            return
        asked, prompt = self.spec.max_tokens, len(self.conversation.ids)
        limit = f"data.max_tokens={asked}" if asked and asked <= self.max_tokens else f"the environment's token limit ({self.max_tokens})"
        raise LimitError(
            f"{limit} leaves no room for a model turn: the prompt of task {self.spec.task} (seed {self.spec.seed}) takes {prompt} "
            f"tokens; raise {limit.split('=')[0]} to at least {prompt + max_new_tokens} (the prompt + policy.sampling.max_new_tokens)"
        )

    def stop(self) -> None:
        """End the episode here, on the token limit (the session is closed)."""
        if not self.done:
            self.env.close(self.session)
            self.done = True

    def episode(self, task_id: str, digest: str, version: int, tokenizer: str) -> Episode:
        return Episode(task_id, digest, tuple(self.conversation.turns), self.finish_reason, version, tokenizer)


@dataclass(frozen=True)
class Replayed:
    reward: float
    finish_reason: FinishReason


class MeteredEnv(EnvClient):
    """``env``, charging the sandbox CPU each call reports to the sender being replayed
    (``core.meter``), and refusing to go on once that sender's budget is spent."""

    def __init__(self, env: EnvClient) -> None:
        self.env = env

    def _charged(self, cpu_seconds: float) -> None:
        meter.charge(cpu_seconds)
        if meter.remaining() <= 0:
            raise CutOff("replaying its episode used this peer's environment past the sender's CPU budget")

    def reset(self, task: TaskSpec) -> Reset:
        first = self.env.reset(task)
        self._charged(first.cpu_seconds)
        return first

    def step(self, session: str, action: Action, tokens: int = 0) -> StepResult:
        result = self.env.step(session, action, tokens)
        self._charged(result.cpu_seconds)
        return result

    def close(self, session: str) -> bool:
        return self.env.close(session)

    def stats(self) -> Stats:
        return self.env.stats()

    def shutdown(self) -> None:
        """The wrapped client is shared: not this wrapper's to shut down."""


def replay(episode: Episode, spec: TaskSpec, env: EnvClient, renderer: ChatRenderer, prefill: Sequence[str] = ()) -> Replayed:
    """Rerun ``episode``'s model turns in this peer's environment; raise ReplayMismatch when a
    prompt or tool turn differs from what the environment gives, or turns follow the end, and
    CutOff once the sandbox time it costs exceeds the sender's remaining budget."""
    s = Session.start(MeteredEnv(env), spec, renderer, prefill)
    try:
        turns = episode.turns
        if turns[0] != s.conversation.turns[0]:
            raise ReplayMismatch("the prompt turn differs from this peer's rendering of the task")
        at = 1
        while at < len(turns) and not s.done:
            if turns[at].role != "assistant":
                raise ReplayMismatch(f"turn {at} is a {turns[at].role} turn where the model's turn was due")
            s.turn(turns[at].token_ids, turns[at].logprobs)
            mine = s.conversation.turns
            if len(mine) > at + 1:  # the environment answered: the sender's next turn must be it
                if at + 1 == len(turns) and episode.finish_reason == "error":
                    return Replayed(0.0, "error")  # the sender's session was lost here: nothing to score
                if at + 1 >= len(turns) or turns[at + 1] != mine[at + 1]:
                    raise ReplayMismatch(f"turn {at + 1}: the tool result does not replay in this peer's environment")
                at += 1
            at += 1
        if at < len(turns):
            raise ReplayMismatch(f"{len(turns) - at} turn(s) after the episode ended")
        if not s.done:
            raise ReplayMismatch("the episode stops before the environment or its token limit ended it")
        return Replayed(s.reward, s.finish_reason)
    finally:
        s.stop()
