"""Agents: tool-calling, multi-turn episodes. The environment API (typed actions and messages),
the tool-call parser a policy uses, the tasks, and the sandbox their tools run in. The service
that hosts sessions is ``genrl_swarm.envd``. Imports nothing heavy (no grpc, no torch)."""

from genrl_swarm.agents.errors import EnvError, EnvUnavailable, InvalidRequest, Overloaded, SessionLost, SessionNotFound
from genrl_swarm.agents.parsing import parse_action, parse_tool_call
from genrl_swarm.agents.tasks import DEFAULT_TASKS, TASKS
from genrl_swarm.agents.types import Action, Answer, FinishReason, Limits, Message, Reset, StepResult, TaskSpec, ToolCall, ToolError

__all__ = [
    "DEFAULT_TASKS", "TASKS", "Action", "Answer", "EnvError", "EnvUnavailable", "FinishReason", "InvalidRequest", "Limits",
    "Message", "Overloaded", "Reset", "SessionLost", "SessionNotFound", "StepResult", "TaskSpec", "ToolCall", "ToolError",
    "parse_action", "parse_tool_call",
]  # fmt: skip
