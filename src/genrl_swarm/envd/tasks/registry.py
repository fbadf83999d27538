"""Which tasks exist: the packaged ones and those installed packages register (plug-ins).

Why entry points: the task code runs in fresh interpreters (the service's workers and their
sandboxed children), which know only what they import. A task registered under the entry-point
group ``genrl_swarm.agent_tasks`` by an installed distribution is found by every interpreter of
the same environment, with no extra process and nothing to pass along::

    [project.entry-points."genrl_swarm.agent_tasks"]
    unit-converter = "unitconv:UnitConverter"      # a Task subclass (or instance) named unit-converter

Plug-ins load once per process, on the first lookup (``load`` does it ahead, for the sandbox:
before its audit hook). A plug-in that cannot load does not take the packaged tasks down with
it: it is listed in ``broken`` and every message that names it as unknown says why.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from importlib.metadata import EntryPoint, entry_points

from genrl_swarm.envd.tasks.base import Task

GROUP = "genrl_swarm.agent_tasks"


def plugin_task(ep: EntryPoint) -> Task:
    """The task entry point ``ep`` names; ValueError (one line) when it is not a usable task."""
    where = f"{ep.value} (from {ep.dist.name if ep.dist else 'an unknown distribution'})"
    try:
        found = ep.load()
        task = found() if isinstance(found, type) and issubclass(found, Task) else found
    except Exception as e:  # noqa: BLE001 - any failure of third-party import code is reported, not raised through
        raise ValueError(f"{where} failed to load: {type(e).__name__}: {e}") from None
    if not isinstance(task, Task):
        raise ValueError(f"{where} is a {type(task).__name__}, not a genrl_swarm.envd.tasks.Task (subclass or instance)")
    if task.name != ep.name:
        raise ValueError(f"{where} is registered as {ep.name!r} but its task is named {task.name!r}: use one name")
    return task


class TaskRegistry(Mapping[str, Task]):
    """Every task by name: ``packaged`` first, then plug-ins of ``group`` (a name taken already
    makes the plug-in broken, never replaces a task)."""

    def __init__(self, packaged: Iterable[Task], group: str = GROUP) -> None:
        self.packaged: dict[str, Task] = {t.name: t for t in packaged}
        self.group = group
        self._broken: dict[str, str] = {}
        self._tasks: dict[str, Task] | None = None
        self._lock = threading.Lock()

    def load(self) -> dict[str, Task]:
        """Every task, importing the plug-ins on the first call."""
        with self._lock:
            if self._tasks is None:
                tasks = dict(self.packaged)
                by_name: dict[str, list[EntryPoint]] = {}
                for ep in entry_points(group=self.group):
                    by_name.setdefault(ep.name, []).append(ep)
                for name, eps in by_name.items():
                    if name in tasks:
                        self._broken[name] = f"{eps[0].value}: the name {name!r} is a packaged task's"
                    elif len(eps) > 1:
                        self._broken[name] = f"{name!r} is registered {len(eps)} times ({', '.join(e.value for e in eps)}): one name, one task"
                    else:
                        try:
                            tasks[name] = plugin_task(eps[0])
                        except ValueError as e:
                            self._broken[name] = str(e)
                self._tasks = tasks
            return self._tasks

    @property
    def plugins(self) -> tuple[str, ...]:
        """The names of the plug-in tasks that loaded, in entry-point order."""
        return tuple(n for n in self.load() if n not in self.packaged)

    @property
    def broken(self) -> dict[str, str]:
        """Plug-ins that did not load: name -> why."""
        self.load()
        return dict(self._broken)

    def __getitem__(self, name: str) -> Task:
        return self.load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.load())

    def __len__(self) -> int:
        return len(self.load())

    def unknown(self, names: Iterable[str]) -> str | None:
        """The one message for names that are not tasks here (None when all are): the first
        unknown name, why when it is a broken plug-in, and the known ones. Every check of a
        task name (recipes, the service's configuration) says it this way."""
        missing = [n for n in names if n not in self.load()]
        if not missing:
            return None
        name = missing[0]
        if name in self._broken:
            return f"task {name!r} is an installed plug-in ({self.group}) that cannot be used: {self._broken[name]}"
        return f"unknown task {name!r} (known: {', '.join(sorted(self))}; a package adds tasks under the entry-point group {self.group})"
