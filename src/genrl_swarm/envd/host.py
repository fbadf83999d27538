"""SessionHost: the episodes of one worker process — sessions, limits, tool calls in the sandbox.

Everything the model controls is checked here before any task code runs: the tool exists, the
arguments fit its schema, the session is within its turns, tokens and bytes. A model's mistake
becomes a message it sees; a tool that breaks the sandbox ends its session with an error message
(``finish_reason="error"``); only requests that make no sense (unknown session, unknown task)
raise ``EnvError``. Session ids are chosen by the caller (the controller routes by them).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from genrl_swarm.envd.errors import EnvError, InvalidRequest, SessionNotFound
from genrl_swarm.envd.jobs import CallJob, SandboxDied, SandboxLimits, SetupJob
from genrl_swarm.envd.parsing import FORMAT_HINT
from genrl_swarm.envd.sandbox_pool import SandboxPool
from genrl_swarm.envd.tasks import DEFAULT_TASKS, TASKS, Task
from genrl_swarm.envd.types import MAX_TEXT, Action, Answer, FinishReason, Limits, Message, Reset, StepResult, TaskSpec, ToolCall, ToolError

log = logging.getLogger(__name__)
SYSTEM_PROMPT = f"You solve tasks with the tools you are given. {FORMAT_HINT} Call one tool per turn and read its result."


def cut(text: str, cap: int) -> str:
    """``text`` within ``cap`` characters (never over MAX_TEXT, the wire's limit), saying so when cut.

    Every message the host returns goes through here: several echo the model's own text (a
    ToolError, an unknown argument's name), and a reply over MAX_TEXT would fail the
    controller's validated decode."""
    if len(text) <= min(cap, MAX_TEXT):
        return text
    note = f"\n(cut: {len(text)} characters, {{}} shown)"
    keep = max(0, min(cap, MAX_TEXT - len(note.format(MAX_TEXT))))
    return text[:keep] + note.format(keep)


class HostConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Limits and resources of one worker's sessions. ``max_turns``/``max_tokens`` are both the
    default and the ceiling a TaskSpec may lower."""

    tasks: tuple[str, ...] = ()  # () -> offered(): DEFAULT_TASKS and every installed plug-in task
    sandboxes: int = 2
    sandbox: SandboxLimits = SandboxLimits()
    max_turns: int = 16
    max_tokens: int = 4096
    max_bytes: int = 256 << 10  # tool calls and results of one session
    max_result_chars: int = 4000  # one tool result or error shown to the model (longer ones are cut)
    scratch_root: str = ""  # "" -> a fresh temporary directory

    def __post_init__(self) -> None:
        unknown = TASKS.unknown(self.tasks)
        if unknown:
            raise ValueError(unknown)
        if self.sandboxes < 1 or self.max_turns < 1 or self.max_tokens < 1:
            raise ValueError("sandboxes, max_turns and max_tokens must be >= 1")

    def offered(self) -> tuple[str, ...]:
        """The tasks sessions may play: ``tasks``, or by default the packaged defaults and every
        installed plug-in task (workers resolve it themselves: same environment, same answer)."""
        return self.tasks or (*DEFAULT_TASKS, *TASKS.plugins)


@dataclass
class Session:
    id: str
    task: Task
    truth: str
    state: Any
    scratch: Path | None
    limits: Limits
    turns: int = 0
    bytes: int = 0
    busy: bool = False
    cpu: float = 0.0  # sandbox CPU since the last step reported it

    def take_cpu(self) -> float:
        spent, self.cpu = self.cpu, 0.0
        return spent


class SessionHost:
    """The sessions of one worker. Async: tool calls of different sessions overlap."""

    def __init__(self, config: HostConfig) -> None:
        self.config = config
        self.root = Path(config.scratch_root or tempfile.mkdtemp(prefix="genrl-envd-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.pool = SandboxPool(config.sandboxes, config.sandbox, self.root)
        self.sessions: dict[str, Session] = {}
        self.steps = 0

    async def start(self) -> None:
        await self.pool.start()

    async def stop(self) -> None:
        await self.pool.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ requests
    async def reset(self, session_id: str, spec: TaskSpec) -> Reset:
        offered = self.config.offered()
        if spec.task not in offered:
            raise InvalidRequest(f"unknown task {spec.task!r}; this server offers {', '.join(offered)}")
        if session_id in self.sessions:
            raise InvalidRequest(f"session {session_id} exists already")
        task = TASKS[spec.task]
        scratch = self.root / session_id if task.needs_scratch else None
        if scratch is not None:
            scratch.mkdir()
        try:
            reply, cpu = await self.pool.run(SetupJob(task.name, spec.seed, str(scratch) if scratch else None))
        except SandboxDied as e:
            self._remove_scratch(scratch)
            raise EnvError(f"setting up {task.name} (seed {spec.seed}) failed: {e}") from None
        if reply.setup is None:
            self._remove_scratch(scratch)
            raise EnvError(f"setting up {task.name} (seed {spec.seed}) failed: {reply.message}")
        limits = Limits(
            max_turns=min(spec.max_turns or self.config.max_turns, self.config.max_turns),
            max_tokens=min(spec.max_tokens or self.config.max_tokens, self.config.max_tokens),
            max_bytes=self.config.max_bytes,
        )
        self.sessions[session_id] = Session(session_id, task, reply.setup.truth, reply.setup.state, scratch, limits)
        messages = (Message("system", SYSTEM_PROMPT), Message("user", cut(reply.setup.prompt, MAX_TEXT)))
        return Reset(session_id, task.name, messages, tuple(t.declaration() for t in task.tools), limits, cpu)

    async def step(self, session_id: str, action: Action, tokens: int = 0) -> StepResult:
        session = self.sessions.get(session_id)
        if session is None:
            raise SessionNotFound(f"no session {session_id} on this worker (closed, finished or expired)")
        if session.busy:
            raise InvalidRequest(f"session {session_id} is still running a step; send one step at a time")
        session.busy = True
        try:
            result = await self._step(session, action, tokens)
        finally:
            session.busy = False
        self.steps += 1
        message = result.message
        if len(message.content) > MAX_TEXT:  # a safety net: each message is cut where it is built
            result = msgspec.structs.replace(result, message=msgspec.structs.replace(message, content=cut(message.content, MAX_TEXT)))
        if result.done:
            self.close(session_id)
        return result

    def close(self, session_id: str) -> bool:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self._remove_scratch(session.scratch)
        return session is not None

    # ------------------------------------------------------------------ one turn
    async def _step(self, s: Session, action: Action, tokens: int) -> StepResult:
        s.turns += 1
        if tokens > s.limits.max_tokens:
            return self._end(s, "token_limit", Message("user", f"The episode used {tokens} tokens, over its {s.limits.max_tokens}."))
        if isinstance(action, Answer):
            reward = s.task.reward(action.text, s.truth, s.state)
            return self._end(s, "answer", Message("user", "Answer received."), reward)
        if isinstance(action, ToolError):
            message = Message("user", cut(f"Error: {action.message}", self.config.max_result_chars))  # the model's own text
        else:
            message, fatal = await self._call(s, action)
            if fatal:
                return self._end(s, "error", message)
        if s.bytes > s.limits.max_bytes:
            return self._end(s, "error", Message("user", f"The session exchanged over {s.limits.max_bytes} bytes with its tools."))
        if s.turns >= s.limits.max_turns:
            return self._end(s, "turn_limit", message)
        return StepResult(message, False, turn=s.turns, cpu_seconds=s.take_cpu())

    async def _call(self, s: Session, call: ToolCall) -> tuple[Message, bool]:
        """The tool's result as a message, and whether the session must end (the tool broke)."""
        call_id = call.id or f"call_{s.turns}"
        cap = self.config.max_result_chars

        def said(content: str) -> Message:  # every tool message, cut to what the model is shown
            return Message("tool", cut(content, cap), call.name, call_id)

        tool = s.task.tool(call.name)
        if tool is None:
            names = ", ".join(t.name for t in s.task.tools)
            return said(f"Error: there is no tool {call.name!r}; the tools are {names}."), False
        problem = tool.problem(call.arguments)
        if problem:  # may quote the model's argument names
            return said(f"Error: {problem}."), False
        s.bytes += len(json.dumps(call.arguments))
        try:
            reply, cpu = await self.pool.run(CallJob(s.task.name, call.name, call.arguments, s.state, str(s.scratch) if s.scratch else None))
        except SandboxDied as e:
            s.cpu += e.cpu_seconds
            return said(f"Error: {e}; the episode ends."), True
        s.cpu += cpu
        if reply.kind == "crashed" or (reply.kind == "ok" and reply.outcome is None):
            return said(f"Error: the tool failed ({reply.message}); the episode ends."), True
        if reply.kind == "tool_failed":
            content = f"Error: {reply.message}"
        else:
            assert reply.outcome is not None
            s.state, content = reply.outcome.state, reply.outcome.content
        s.bytes += len(content)
        return said(content), False

    def _end(self, s: Session, reason: FinishReason, message: Message, reward: float = 0.0) -> StepResult:
        return StepResult(message, True, reward, reason, s.turns, s.take_cpu())

    def _remove_scratch(self, scratch: Path | None) -> None:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)

    def stats(self) -> dict[str, Any]:
        return {"sessions": len(self.sessions), "steps": self.steps, "sandbox_deaths": self.pool.deaths, "isolation": self.pool.isolation}
