"""envd: the environment service and its wire. The typed actions and messages, the tool-call
parser, the tasks and the sandbox their tools run in; a controller routes sessions to worker
processes whose sandboxed children run the task code; reachable in-process (``LocalEnv``) or
over gRPC (``genrl-swarm envd``, ``RemoteEnv``). grpc is imported only by the gRPC modules, and
nothing here imports the training side (``genrl_swarm.paradigms.agents``)."""

from genrl_swarm.envd.api import EnvClient, Environment
from genrl_swarm.envd.connect import connect
from genrl_swarm.envd.controller import EnvdConfig
from genrl_swarm.envd.errors import EnvError, EnvUnavailable, InvalidRequest, Overloaded, SessionLost, SessionNotFound
from genrl_swarm.envd.parsing import parse_action, parse_tool_call
from genrl_swarm.envd.tasks import DEFAULT_TASKS, TASKS
from genrl_swarm.envd.types import Action, Answer, FinishReason, Limits, Message, Reset, StepResult, TaskSpec, ToolCall, ToolError

__all__ = [
    "DEFAULT_TASKS", "TASKS", "Action", "Answer", "EnvClient", "EnvError", "EnvUnavailable", "EnvdConfig", "Environment",
    "FinishReason", "InvalidRequest", "Limits", "Message", "Overloaded", "Reset", "SessionLost", "SessionNotFound",
    "StepResult", "TaskSpec", "ToolCall", "ToolError", "connect", "parse_action", "parse_tool_call",
]  # fmt: skip
