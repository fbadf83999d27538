"""The tasks, by name: the packaged ones and those installed packages register (``registry``).
``DEFAULT_TASKS`` are the packaged tasks a server offers unless told otherwise, with every
installed plug-in task (the sandbox probe is for tests and deployment checks)."""

from __future__ import annotations

from genrl_swarm.envd.tasks.base import Outcome, Setup, Task, ToolFailure
from genrl_swarm.envd.tasks.calculator import Calculator, CalculatorOne, CalculatorTwo
from genrl_swarm.envd.tasks.kvstore import KvStore
from genrl_swarm.envd.tasks.probe import Probe
from genrl_swarm.envd.tasks.registry import GROUP, TaskRegistry
from genrl_swarm.envd.tasks.sql import Sql

TASKS = TaskRegistry((Calculator(), CalculatorOne(), CalculatorTwo(), Sql(), KvStore(), Probe()))
DEFAULT_TASKS: tuple[str, ...] = ("calculator", "calculator-1", "calculator-2", "sql", "kvstore")

__all__ = [
    "DEFAULT_TASKS",
    "GROUP",
    "TASKS",
    "Calculator",
    "CalculatorOne",
    "CalculatorTwo",
    "KvStore",
    "Outcome",
    "Probe",
    "Setup",
    "Sql",
    "Task",
    "TaskRegistry",
    "ToolFailure",
]
