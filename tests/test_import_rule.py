"""The import rule of docs/architecture.md: a package imports only packages of a lower layer, and
no two modules import each other (directly or round a longer loop).

The layer table in the docs is the rule; this test reads it, so the docs and the code cannot drift
apart. For layers, imports inside functions count too: a lazy import is still a dependency."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
ROW = re.compile(r"^\| (\d+) \| `genrl_swarm\.([\w.]+)` \|")


def layers(doc: str) -> dict[str, int]:
    return {m[2]: int(m[1]) for line in doc.splitlines() if (m := ROW.match(line))}


def _nodes(tree: ast.AST, lazy: bool):
    """The statements of a module; with ``lazy`` also those inside functions."""
    for node in ast.iter_child_nodes(tree):
        if lazy or not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield node
            yield from _nodes(node, lazy)


def imports(path: Path, known: set[str], lazy: bool = True) -> set[str]:
    """The project modules `path` imports: at import time, and with ``lazy`` also inside functions."""
    found: set[str] = set()
    for node in _nodes(ast.parse(path.read_text()), lazy):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in known}


def modules(src: Path) -> dict[str, Path]:
    out = {}
    for path in (src / "genrl_swarm").rglob("*.py"):
        name = ".".join(path.relative_to(src).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def package(module: str) -> str:
    """The row of the layer table a module belongs to: ``core`` for ``genrl_swarm.core.x``, and
    one row per paradigm (``paradigms.lm`` for ``genrl_swarm.paradigms.lm.x``)."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "paradigms":
        return ".".join(parts[1:3])
    return parts[1] if len(parts) > 1 else ""


def upward(src: Path, table: dict[str, int]) -> list[str]:
    mods = modules(src)
    table = {**table, "": 0}  # genrl_swarm/__init__.py: the version, nothing else
    bad = []
    for name, path in mods.items():
        mine = package(name)
        if mine not in table:
            bad.append(f"{name}: package {mine!r} is not in the layer table")
            continue
        for target in imports(path, set(mods)):
            theirs = package(target)
            if theirs != mine and table.get(theirs, 10**6) >= table[mine]:
                bad.append(f"{name} (layer {table[mine]}) imports {target} (layer {table.get(theirs)})")
    return sorted(bad)


def cycles(src: Path) -> list[list[str]]:
    """Module cycles, imports inside functions included: a lazy import is still a dependency, and
    a circle of them means two modules that cannot be understood (or moved) apart. Importing a
    parent package from inside it does not count (Python has already started that package when
    its submodule runs)."""
    mods = modules(src)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets = set()
        for target in imports(path, set(mods)):
            parts = target.split(".")
            targets.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
        graph[name] = {t for t in targets if t in mods and t != name and not name.startswith(t + ".")}
    found, index, low, stack, on = [], {}, {}, [], set()

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                on.discard(w)
                component.append(w)
            on.discard(v)
            if component:
                found.append(sorted([v, *component]))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_every_package_imports_only_lower_layers():
    table = layers((ROOT / "docs/architecture.md").read_text())
    assert {"core", "envd", "paradigms", "paradigms.lm", "paradigms.agents", "paradigms.marl", "games", "cli"} <= set(table)
    assert upward(SRC, table) == []


def test_no_module_cycles():
    assert cycles(SRC) == []


def test_the_environment_service_never_imports_the_training_side():
    mods = modules(SRC)
    envd = [n for n in mods if package(n) == "envd"]
    assert envd and not [n for n in envd if any(package(t).startswith("paradigms") for t in imports(mods[n], set(mods)))]


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "genrl_swarm" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_checks_catch_an_upward_import_and_a_cycle(tmp_path):
    src = _tree(tmp_path, {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/a.py": "def f():\n    import genrl_swarm.paradigms.agents\n",
        "paradigms/__init__.py": "",
        "paradigms/agents/__init__.py": "",
        "paradigms/agents/b.py": "from genrl_swarm.paradigms.agents.c import x\n",
        "paradigms/agents/c.py": "from genrl_swarm.paradigms.agents.b import y\nfrom genrl_swarm.core import a\n",
        "paradigms/agents/d.py": "def f():\n    from genrl_swarm.paradigms.agents.e import z\n",
        "paradigms/agents/e.py": "from genrl_swarm.paradigms.agents.d import w\n",
    })  # fmt: skip
    assert upward(src, {"core": 1, "paradigms": 0, "paradigms.agents": 2}) == [
        "genrl_swarm.core.a (layer 1) imports genrl_swarm.paradigms.agents (layer 2)"
    ]
    assert sorted(cycles(src)) == [  # the second circle closes inside a function: still a circle
        ["genrl_swarm.paradigms.agents.b", "genrl_swarm.paradigms.agents.c"],
        ["genrl_swarm.paradigms.agents.d", "genrl_swarm.paradigms.agents.e"],
    ]
    assert upward(src, {"core": 2, "paradigms": 0, "paradigms.agents": 2}) == [
        "genrl_swarm.core.a (layer 2) imports genrl_swarm.paradigms.agents (layer 2)",
        "genrl_swarm.paradigms.agents.c (layer 2) imports genrl_swarm.core (layer 2)",
        "genrl_swarm.paradigms.agents.c (layer 2) imports genrl_swarm.core.a (layer 2)",
    ]
