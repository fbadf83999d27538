"""The test suite's own rules: skips match imports, and a hang fails.

A test module that needs an optional extra at import time (directly, or through a genrl_swarm
module that imports it at module level) must skip with a reason when the extra is missing, by a
module-level ``pytest.importorskip("<package>")`` before that import. Without it, a machine
without the extra gets a collection error instead of a skip; with a guard for a package the
module does not need, tests are skipped for nothing. Checked statically, from the source.
"""

from __future__ import annotations

import ast
import gc
from functools import cache
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).parents[1]
SRC = ROOT / "src"

# Import names of the packages behind pyproject's optional extras, by extra (an extra installs as
# a unit, so guarding one of its packages guards them all). Core and dev dependencies are not here.
EXTRAS = {
    "torch": {"torch"},  # also in examples, agent and async: the paradigms that train with it
    "examples": {"transformers", "tokenizers", "reasoning_gym", "peft", "matplotlib", "gguf"},
    "chain": {"web3", "eth_tester", "eth_account", "eth_utils"},
    "hivemind": {"hivemind"},
    "marl": {"jax", "jaxlib", "flax", "optax", "distrax", "jumanji", "chex"},
    "dashboard": {"starlette", "uvicorn"},
    "agent": {"grpc"},
    "async": {"ray"},
    "openenv": {"openenv"},
    "trackers": {"trackio", "wandb"},
}
EXTRA_OF = {package: extra for extra, packages in EXTRAS.items() for package in packages}
OPTIONAL = frozenset(EXTRA_OF)


def _top_level_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of imports that run when the module is imported (not in defs or TYPE_CHECKING)."""
    found: list[tuple[int, str]] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.extend((node.lineno, alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((node.lineno, node.module))
                found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body + node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)  # an optional import in try/except ImportError is guarded already

    visit(tree.body)
    return found


@cache
def _parsed(path: Path) -> ast.Module:
    """``ast.parse`` with the garbage collector held off. Why: on CPython 3.11 a collection during
    the parse can finalize an asyncio task an earlier test leaked (a p2pd connection reset); its
    "exception was never retrieved" log formats a traceback, which parses source itself, and the
    nested parse breaks the outer one ("AST constructor recursion depth mismatch", a CPython 3.11 SystemError)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(path.read_text())
    finally:
        if enabled:
            gc.enable()


def _source_of(module: str) -> Path | None:
    base = SRC / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


@cache
def optional_needs(module: str) -> frozenset[str]:
    """Optional packages that importing genrl_swarm ``module`` imports, transitively, at module level."""
    needs: set[str] = set()
    seen: set[Path] = set()
    todo = [module]
    while todo:
        parts = todo.pop().split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__, a/b/__init__, then a/b/c
            path = _source_of(".".join(parts[:i]))
            if path is None or path in seen:
                continue
            seen.add(path)
            for _, imported in _top_level_imports(_parsed(path)):
                top = imported.split(".")[0]
                if top in OPTIONAL:
                    needs.add(top)
                elif top == "genrl_swarm":
                    todo.append(imported)
    return frozenset(needs)


def _guards(tree: ast.Module) -> dict[str, int]:
    """Package -> line of each module-level ``pytest.importorskip("<package>")``."""
    guards: dict[str, int] = {}
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Expr, ast.Assign)) else None
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "pytest.importorskip":
            arg = value.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                guards[arg.value.split(".")[0]] = node.lineno
    return guards


def _needs_of_test_module(tree: ast.Module) -> dict[str, int]:
    """Optional package -> first line that needs it, for a test module."""
    needs: dict[str, int] = {}
    for line, imported in _top_level_imports(tree):
        top = imported.split(".")[0]
        found = {top} if top in OPTIONAL else optional_needs(imported) if top == "genrl_swarm" else set()
        for package in found:
            needs.setdefault(package, line)
    return needs


TEST_FILES = sorted(p for p in (ROOT / "tests").glob("*.py") if p.name.startswith("test_"))


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_skip_conditions_match_what_the_module_imports(path: Path) -> None:
    tree = _parsed(path)
    needs, guards = _needs_of_test_module(tree), _guards(tree)
    guarded_at = {EXTRA_OF[p]: line for p, line in sorted(guards.items(), key=lambda g: -g[1]) if p in EXTRA_OF}
    unguarded = {p: line for p, line in needs.items() if guarded_at.get(EXTRA_OF[p], line + 1) > line}
    assert not unguarded, f"{path.name} imports optional {sorted(unguarded)} (line {min(unguarded.values())}) without a pytest.importorskip before it"
    # A guard for a package the module never needs would skip its tests for nothing.
    needless = sorted(set(guards) - set(needs) - _used_inside_functions(tree) - _bound_guards(tree))
    assert not needless, f"{path.name} skips without {needless}, which it does not import"


def _bound_guards(tree: ast.Module) -> set[str]:
    """Packages whose guard binds the module (``web3 = pytest.importorskip("web3")``) for later use."""
    return {
        node.value.args[0].value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.value.args
        and isinstance(node.value.args[0], ast.Constant) and ast.unparse(node.value.func) == "pytest.importorskip"
    }  # fmt: skip


def _used_inside_functions(tree: ast.Module) -> set[str]:
    """Optional packages imported inside functions or fixtures (a module-level guard is then right)."""
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            used |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            used |= {top} if top in OPTIONAL else set(optional_needs(node.module)) if top == "genrl_swarm" else set()
    return used & OPTIONAL


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_tests_import_their_helpers_from_helpers_not_conftest(path: Path) -> None:
    """conftest.py is for pytest (fixtures, hooks): importing it by name works only under pytest's
    default import mode and ties a test to a file pytest loads by itself. Shared test code lives
    in tests/helpers/."""
    found = [
        node.lineno
        for node in ast.walk(_parsed(path))
        if (isinstance(node, ast.ImportFrom) and node.module == "conftest")
        or (isinstance(node, ast.Import) and any(a.name == "conftest" for a in node.names))
    ]
    assert not found, f"{path.name} imports conftest (line {found[0]}): import from helpers instead"


def test_the_checker_sees_a_transitive_optional_import() -> None:
    """genrl_swarm.games.marl imports jax through genrl_swarm.paradigms.marl: the checker must know."""
    assert {"jax", "jumanji"} <= optional_needs("genrl_swarm.games.marl")
    assert optional_needs("genrl_swarm.paradigms.lm.policy") == {"torch"}  # transformers is imported where it is used
    assert not optional_needs("genrl_swarm.core.types")
    assert not optional_needs("genrl_swarm.run.launcher")  # the core install has no torch (tests/test_torchless.py)


def test_a_hang_fails_instead_of_blocking() -> None:
    """pytest-timeout is configured, so a hung test fails the run with a stack dump."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert 0 < int(options["timeout"]) <= 600
