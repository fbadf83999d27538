"""The typed environment API: what a policy sends (actions) and what it gets back (messages).

These structs are the whole contract between a policy and an environment, in-process or over
gRPC: the same msgspec types are encoded on the wire, so a request is size- and shape-checked
while it is decoded. Messages render directly into a Hugging Face chat template
(``Message.to_chat``, ``ToolCall.to_chat``); tools are declared in the OpenAI/HF ``tools=`` format.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

#: Ceilings of the wire types; servers apply tighter per-session limits (``Limits``).
MAX_TEXT = 64 << 10  # one message or answer, in characters
MAX_ARGUMENTS = 32  # keys of one tool call's arguments

Name = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")]
SessionId = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{8,64}$")]
Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]
Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["answer", "turn_limit", "token_limit", "error"]


class ToolCall(msgspec.Struct, frozen=True, tag="call", forbid_unknown_fields=True):
    """A well-formed call of a tool by name. The arguments are checked against the tool's JSON
    schema by the environment, not here: a bad argument is the model's mistake, shown to it."""

    name: Name
    arguments: Annotated[dict[str, Any], msgspec.Meta(max_length=MAX_ARGUMENTS)] = {}
    id: Annotated[str, msgspec.Meta(max_length=64)] = ""

    def to_chat(self) -> dict[str, Any]:
        """The entry of an assistant message's ``tool_calls`` list in HF chat templates."""
        call: dict[str, Any] = {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return {"id": self.id, **call} if self.id else call


class Answer(msgspec.Struct, frozen=True, tag="answer", forbid_unknown_fields=True):
    """The model's final answer: ends the episode and is scored."""

    text: Text


class ToolError(msgspec.Struct, frozen=True, tag="error", forbid_unknown_fields=True):
    """Model output that is neither a well-formed call nor an answer. Sent to ``step`` like any
    action: it costs a turn and comes back as an error message the model sees."""

    message: Text


Action = ToolCall | Answer | ToolError


class Message(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """One chat message. Tool results have role ``tool`` and name the tool they answer."""

    role: Role
    content: Text
    name: Annotated[str, msgspec.Meta(max_length=64)] = ""
    tool_call_id: Annotated[str, msgspec.Meta(max_length=64)] = ""

    def to_chat(self) -> dict[str, Any]:
        """A dict for ``tokenizer.apply_chat_template(messages, tools=...)``."""
        return msgspec.to_builtins(self)


class TaskSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Which episode to start: a task by name and the seed that makes it (question, database,
    ground truth). ``max_turns``/``max_tokens`` ask for tighter limits than the server's (0: its
    defaults); a server never grants more than its own ceilings."""

    task: Name
    seed: Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)] = 0
    max_turns: Annotated[int, msgspec.Meta(ge=0, le=1024)] = 0
    max_tokens: Annotated[int, msgspec.Meta(ge=0, le=1 << 20)] = 0


class Limits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What an episode may use. The environment counts turns and bytes; the policy counts
    tokens (it owns the tokenizer) and reports them with each step (``tokens``)."""

    max_turns: int
    max_tokens: int
    max_bytes: int  # tool calls and results of the whole session, encoded


class Reset(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A started episode: its session, the first messages and the tools it may call."""

    session: SessionId
    task: Name
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]  # OpenAI/HF tools= entries: {"type": "function", "function": {...}}
    limits: Limits
    cpu_seconds: float = 0.0  # sandbox CPU the setup took: what a replay on a sender's behalf charges it


class StepResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one action produced: the message to append (a tool result, a tool error, or a closing
    note), whether the episode is over, why, and its reward (0 until done)."""

    message: Message
    done: bool
    reward: float = 0.0
    finish_reason: FinishReason | None = None
    turn: int = 0  # turns taken so far, this one included
    cpu_seconds: float = 0.0  # sandbox CPU this step took: what a replay on a sender's behalf charges it
