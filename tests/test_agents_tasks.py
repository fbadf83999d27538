"""Every task's reward, right and wrong, verified from the task seed alone.

Task code is called directly here, for speed; the service only ever runs it in sandboxed
children (tests/test_agents_sandbox.py, tests/test_envd_service.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from genrl_swarm.envd.tasks import TASKS, Setup, ToolFailure
from genrl_swarm.envd.tasks.arith import evaluate, show

calculator, sql, kv = TASKS["calculator"], TASKS["sql"], TASKS["kvstore"]


# --------------------------------------------------------------------------- calculator
@pytest.mark.parametrize("seed", range(5))
def test_calculator_reward(seed: int) -> None:
    setup = calculator.setup(seed, None)
    expression = re.search(r"What is (.+)\?", setup.prompt)[1]  # type: ignore[index]
    result = calculator.call("calculate", {"expression": expression}, None, None).content
    assert result == setup.truth == str(eval(expression))  # noqa: S307 - the test's own oracle on its own expression
    assert calculator.reward(result, setup.truth, None) == 1.0
    assert calculator.reward(f"{int(result):,}", setup.truth, None) == 1.0  # "1,234" is the number 1234
    assert calculator.reward(str(int(result) + 1), setup.truth, None) == 0.0
    assert calculator.reward("I don't know", setup.truth, None) == 0.0
    assert calculator.setup(seed, None) == setup  # the seed alone fixes the question


@pytest.mark.parametrize(
    "expression, value", [("2+3*4", "14"), ("(2+3)*4", "20"), ("-2^2", "-4"), ("2**-1", "0.5"), ("7/3", "2.333333"), ("17 % 5", "2")]
)
def test_calculator_evaluates_exactly(expression: str, value: str) -> None:
    assert show(evaluate(expression)) == value


@pytest.mark.parametrize(
    "expression",
    ["__import__('os').system('true')", "1/0", "2**100000", "9" * 40 + "*" + "9" * 40, "(" * 40 + "1" + ")" * 40, "-" * 40 + "1", "1 +", "2 3"],
)
def test_calculator_refuses_what_is_not_small_arithmetic(expression: str) -> None:
    with pytest.raises(ToolFailure):
        evaluate(expression)


# --------------------------------------------------------------------------- sql
def _query(scratch: Path, query: str) -> str:
    return sql.call("execute_sql", {"query": query}, None, scratch).content


def _first_sql(tmp_path: Path, pattern: str) -> tuple[int, Path, Setup, re.Match[str]]:
    """The first seed whose question matches ``pattern``, with its scratch dir and setup."""
    for seed in range(60):
        scratch = tmp_path / str(seed)
        scratch.mkdir()
        setup = sql.setup(seed, scratch)
        found = re.search(pattern, setup.prompt)
        if found:
            return seed, scratch, setup, found
    raise AssertionError(f"no question matching {pattern!r} in 60 seeds")


def test_sql_reward_matches_the_database(tmp_path: Path) -> None:
    seed, scratch, setup, found = _first_sql(tmp_path, r"How many employees work in the (\w+) department")
    count = _query(scratch, f"SELECT COUNT(*) AS n FROM employees WHERE department = '{found[1]}'").split("\n")[1]
    assert count == setup.truth
    assert sql.reward(count, setup.truth, None) == 1.0
    assert sql.reward(str(int(count) + 1), setup.truth, None) == 0.0
    again = tmp_path / "again"
    again.mkdir()
    assert sql.setup(seed, again) == setup  # rebuilt from the seed: same question, same truth


def test_sql_name_answers_ignore_case(tmp_path: Path) -> None:
    _, _, setup, _ = _first_sql(tmp_path, "highest-paid")
    assert " " in setup.truth  # a full name
    assert sql.reward(f"  {setup.truth.upper()}.", setup.truth, None) == 1.0
    assert sql.reward("Nobody", setup.truth, None) == 0.0


@pytest.mark.parametrize(
    "query, says",
    [
        ("ATTACH DATABASE 'other.db' AS other", "not authorized"),
        ("DELETE FROM employees", "not authorized"),
        ("PRAGMA table_info(employees)", "not authorized"),
        ("SELECT * FROM nowhere", "no such table"),
        ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c", "interrupted"),
    ],
)
def test_sql_queries_are_read_only_and_bounded(tmp_path: Path, query: str, says: str) -> None:
    sql.setup(0, tmp_path)
    with pytest.raises(ToolFailure, match=says):
        _query(tmp_path, query)
    assert _query(tmp_path, "SELECT COUNT(*) FROM employees").split("\n")[1].isdigit()  # the data is intact


@pytest.mark.parametrize(
    "query",
    [
        "SELECT hex(fts3_tokenizer('simple'))",  # leaks a native pointer
        "SELECT fts3_tokenizer('evil', x'4141414141414141')",  # registers a tokenizer at a chosen address
        "SELECT load_extension('/tmp/evil.so')",
        "SELECT sqlite_compileoption_get(0)",
    ],
)
def test_sql_refuses_functions_off_the_allowlist(tmp_path: Path, query: str) -> None:
    sql.setup(0, tmp_path)
    with pytest.raises(ToolFailure, match="not authorized"):
        _query(tmp_path, query)


def test_sql_everyday_functions_still_work(tmp_path: Path) -> None:
    sql.setup(0, tmp_path)
    query = (
        "SELECT department, COUNT(*), SUM(salary), AVG(salary), MIN(salary), MAX(salary), ROUND(AVG(salary), 1), total(salary), "
        "upper(department), lower(substr(department, 1, 3)), length(group_concat(name, ', ')), coalesce(NULL, 1), "
        "ifnull(NULL, 2), nullif(1, 1), typeof(salary), iif(MAX(salary) > 0, 'y', 'n'), printf('%d', MAX(hired)), "
        "date('now') IS NOT NULL, instr(department, 'a'), replace(department, 'a', 'A'), trim(' x '), abs(-3), "
        "CAST(MAX(salary) AS TEXT), department LIKE 'S%', department GLOB 'S*' "
        "FROM employees GROUP BY department ORDER BY department"
    )
    rows = _query(tmp_path, query).split("\n")
    assert len(rows) >= 2 and rows[1].split(" | ")[1].isdigit()


# --------------------------------------------------------------------------- key-value store
def _solve(prompt: str, state: Any) -> Any:
    """A scripted player: reads the goal, plays it through the tools."""

    def tool(name: str, **arguments: str) -> str:
        nonlocal state
        outcome = kv.call(name, arguments, state, None)
        state = outcome.state
        return outcome.content

    keys = tool("list_keys").split(", ")
    if "sum" in prompt:
        tool("set", key="total", value=str(sum(int(tool("get", key=k)) for k in keys if k.startswith("item_"))))
    elif "follow" in prompt:
        value = tool("get", key="start")
        while not value.isdigit():
            value = tool("get", key=value)
        tool("set", key="result", value=value)
    else:
        a, b = re.search(r"keys (\w+) and (\w+)", prompt).groups()  # type: ignore[union-attr]
        va, vb = tool("get", key=a), tool("get", key=b)
        tool("set", key=a, value=vb)
        tool("set", key=b, value=va)
    return state


def test_kvstore_reward_checks_the_final_store() -> None:
    goals = set()
    for seed in range(30):
        setup = kv.setup(seed, None)
        goal = next(g for g in ("sum", "follow", "Swap") if g in setup.prompt)
        goals.add(goal)
        assert kv.reward("done", setup.truth, setup.state) == 0.0  # answering without doing the work
        solved = _solve(setup.prompt, setup.state)
        assert kv.reward("done", setup.truth, solved) == 1.0
        broken = {**solved, next(iter(solved)): "tampered"}
        assert kv.reward("done", setup.truth, broken) == 0.0
    assert goals == {"sum", "follow", "Swap"}


def test_kvstore_tool_errors() -> None:
    with pytest.raises(ToolFailure, match="no key"):
        kv.call("get", {"key": "missing"}, {"a": "1"}, None)
    full = {f"k{i}": "v" for i in range(64)}
    with pytest.raises(ToolFailure, match="full"):
        kv.call("set", {"key": "new", "value": "v"}, full, None)
    assert kv.call("delete", {"key": "k1"}, full, None).state == {k: v for k, v in full.items() if k != "k1"}
    assert len(full) == 64  # tool code returns a new state, it never edits the one it was given
