"""The packaged tasks, by name. ``DEFAULT_TASKS`` are what a server offers unless told otherwise
(the sandbox probe is for tests and deployment checks)."""

from __future__ import annotations

from genrl_swarm.envd.tasks.base import Outcome, Setup, Task, ToolFailure
from genrl_swarm.envd.tasks.calculator import Calculator, CalculatorOne, CalculatorTwo
from genrl_swarm.envd.tasks.kvstore import KvStore
from genrl_swarm.envd.tasks.probe import Probe
from genrl_swarm.envd.tasks.sql import Sql

TASKS: dict[str, Task] = {t.name: t for t in (Calculator(), CalculatorOne(), CalculatorTwo(), Sql(), KvStore(), Probe())}
DEFAULT_TASKS: tuple[str, ...] = ("calculator", "calculator-1", "calculator-2", "sql", "kvstore")

__all__ = [
    "DEFAULT_TASKS",
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
    "ToolFailure",
]
