"""Every module, name, source file and make target that the README and the docs name exists.

Why: a page that names ``genrl_swarm.dashboard.recorder`` or ``make demo-agent-warmup`` (both
were in the docs, issue 47) sends a reader to nothing, and the site's strict build does not see
names in prose or code. Checked statically (files and ASTs, nothing imported), so it runs without
the optional extras. mkdocs.yml's nav entries are checked in test_docs.py
(test_every_page_is_in_the_nav).
"""

from __future__ import annotations

import ast
import fnmatch
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
SRC = ROOT / "src"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
DOTTED = re.compile(r"(?<![\w./-])genrl_swarm(?:\.\w+)+")
IMPORT = re.compile(r"\bfrom (genrl_swarm[\w.]*) import ([\w, ]+)")
SOURCE = re.compile(r"(?<![\w./-])(?:src/)?genrl_swarm/[\w/.*-]*\w/?")  # a trailing "." ends the sentence, not the path
MAKE = re.compile(r"(?:^|[;&|]|\bthen\b)\s*(?:\$\s+)?make((?:[ \t]+[^\s#;&|)`]+)+)")


def _code(text: str) -> list[str]:
    """The page's code: each line of its fenced blocks and each inline code span (a command named
    in prose, like "run ``make demo``", is in a span; "make sure" is not)."""
    spans = re.findall(r"`([^`\n]+)`", FENCE.sub("", text))
    return [line for block in FENCE.findall(text) for line in block.splitlines()] + spans


def _module(parts: list[str]) -> Path | None:
    """The file (or namespace package folder) of the module ``parts``, or None."""
    base = SRC.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py", base):
        if path.exists() and (path.suffix == ".py" or path.is_dir()):
            return path
    return None


def _defined(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module or class body binds (definitions, assignments, imports), also inside
    top-level ``if``/``try`` blocks (optional imports)."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update({n.id: node for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)})
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
        elif isinstance(node, ast.If | ast.Try):
            for block in (node.body, node.orelse, *(h.body for h in getattr(node, "handlers", []))):
                names.update(_defined(block))
    return names


@cache
def _module_names(path: Path) -> dict[str, ast.AST]:
    return _defined(ast.parse(path.read_text()).body)


def dotted_error(name: str) -> str | None:
    """Why ``name`` (a module, or a module then a name in it, then a class member) does not exist,
    or None. Past a name that is not a class defined in the module, nothing more is checked."""
    parts = name.split(".")
    found = next((i for i in range(len(parts), 0, -1) if _module(parts[:i])), 0)
    if not found:
        return f"{name}: no module {parts[0]}"
    path, rest = _module(parts[:found]), parts[found:]
    assert path is not None
    if rest and path.is_dir():
        return f"{name}: {'.'.join(parts[:found])} is a folder without Python, so it has no {rest[0]}"
    names = _module_names(path) if rest else {}
    owner = ".".join(parts[:found])
    for part in rest:
        if part not in names:
            return f"{name}: no module {owner}.{part}, and {owner} defines no {part}"
        node, owner = names[part], f"{owner}.{part}"
        if not isinstance(node, ast.ClassDef):
            return None
        names = _defined(node.body)
    return None


@cache
def make_targets() -> frozenset[str]:
    """The Makefile's explicit targets (rules and .PHONY), not its variables (``X := ...``)."""
    text = (ROOT / "Makefile").read_text()
    rules = re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", text, re.M)
    phony = [t for line in re.findall(r"^\.PHONY:(.*)$", text, re.M) for t in line.split()]
    return frozenset(rules + phony)


def make_errors(line: str) -> list[str]:
    """The targets a ``make ...`` command in ``line`` names that the Makefile lacks (``VAR=value``
    and ``-option`` words are skipped; ``demo*`` must match some target)."""
    errors = []
    for match in MAKE.finditer(line):
        for word in match.group(1).split():
            if "=" in word or word.startswith("-") or "$" in word:
                continue
            if not fnmatch.filter(make_targets(), word):
                errors.append(f"make {word}")
    return errors


@cache
def entry_point_groups() -> frozenset[str]:
    """The entry-point groups plug-ins register under (``GROUP`` of envd/tasks/registry.py): dotted
    like a module, but the name of a registry, not of code."""
    node = _module_names(SRC / "genrl_swarm" / "envd" / "tasks" / "registry.py")["GROUP"]
    assert isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
    return frozenset({node.value.value})


def page_errors(text: str) -> list[str]:
    """Every stale name on a page: modules and names, imported names, source paths, make targets."""
    names = sorted(set(DOTTED.findall(text)) - entry_point_groups())
    errors = [e for name in names if (e := dotted_error(name))]
    for module, imported in IMPORT.findall(text):
        errors += [e for n in imported.replace(" ", "").strip(",").split(",") if n and (e := dotted_error(f"{module}.{n}"))]
    for path in sorted(set(SOURCE.findall(text))):
        found = SRC.glob(path.removeprefix("src/").rstrip("/")) if "*" in path else [SRC / path.removeprefix("src/")]
        if not any(p.exists() for p in found):
            errors.append(f"{path}: no such file or folder under src/")
    return errors + [e for line in _code(text) for e in make_errors(line)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_on_the_page_exists(page: Path) -> None:
    errors = page_errors(page.read_text())
    assert not errors, f"{page.relative_to(ROOT)} names what does not exist: {errors}"


def test_the_checks_catch_stale_names() -> None:
    """The two stale names issue 47 found, and their fixes: the checks would have caught them."""
    assert dotted_error("genrl_swarm.dashboard.recorder.EventLog") is not None
    assert dotted_error("genrl_swarm.run.events.EventLog") is None
    assert dotted_error("genrl_swarm.run.events.EventLog.attach") is None
    assert dotted_error("genrl_swarm.run.events.EventLog.no_such_method") is not None
    assert page_errors("With a warm-up first (`make demo-agent-warmup`).") == ["make demo-agent-warmup"]
    assert page_errors("```bash\nmake demo   # trains\nmake test-fast\n```\nmake sure `make demo*` works") == []
    assert page_errors("from genrl_swarm.core import GameManager, NoSuchThing") != []
    assert page_errors('[project.entry-points."genrl_swarm.agent_tasks"]') == []  # a plug-in group, not a module
    assert page_errors("see src/genrl_swarm/core/game.py and genrl_swarm/core/nothing.py.") == [
        "genrl_swarm/core/nothing.py: no such file or folder under src/"
    ]
