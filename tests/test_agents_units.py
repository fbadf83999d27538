"""Unit checks of the agent task code's edges: the calculator's bounds, the parser's corner cases,
schema limits met exactly, task instances fixed by their seed, and the sandbox probe's tools.

Each test states what a model or a peer would get wrong without it, and each was seen failing
against a mutant of the module it covers. Task code runs in-process here for speed; the service
only runs it in sandboxed children (tests/test_agents_sandbox.py).
"""

from __future__ import annotations

import faulthandler
import hashlib
import json
import os
import resource
import signal
import socket
import sqlite3
import time
from fractions import Fraction
from pathlib import Path

import pytest

from genrl_swarm.envd import Answer, ToolCall, ToolError, parse_action
from genrl_swarm.envd.parsing import FORMAT_HINT, MAX_CALL_CHARS
from genrl_swarm.envd.schema import Param, Tool
from genrl_swarm.envd.tasks import TASKS, Task, ToolFailure
from genrl_swarm.envd.tasks.arith import MAX_CHARS, MAX_DEPTH, evaluate, show
from genrl_swarm.envd.tasks.base import as_number
from genrl_swarm.envd.tasks.sql import DB, MAX_ROWS, _budget
from genrl_swarm.envd.types import MAX_ARGUMENTS, MAX_TEXT

calculator, sql, kv, probe = TASKS["calculator"], TASKS["sql"], TASKS["kvstore"], TASKS["probe"]


# --------------------------------------------------------------------------- arithmetic
def test_the_magnitude_bound_includes_its_limit() -> None:
    """Values up to 10^30 (and denominators up to 10^30) are results; one step past is refused."""
    assert evaluate("10^15 * 10^15") == 10**30
    assert evaluate("1 / 10^15 / 10^15") == Fraction(1, 10**30)
    for past in ("10^30 + 1", "1 / 10^30 / 10"):
        with pytest.raises(ToolFailure, match="^the result is too large$"):
            evaluate(past)


def test_powers_are_computed_whenever_the_result_is_in_bounds() -> None:
    """2^50 is 1.1e15, well inside the bound: the model gets the number, not "too large"."""
    assert evaluate("2^50") == 2**50 and evaluate("2**64") == 2**64 and evaluate("10^30") == 10**30
    assert evaluate("1^64") == 1 and evaluate("(-1)^63") == -1 and evaluate("0^0") == 1
    with pytest.raises(ToolFailure, match="the result is too large"):
        evaluate("10^31")


@pytest.mark.parametrize(
    "expression, says",
    [
        ("4^0.5", "exponents must be whole numbers up to 64"),
        ("2^65", "exponents must be whole numbers up to 64"),
        ("0^-1", "division by zero"),
        ("5 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("", "the expression is empty"),
        ("1 +", "the expression ends too early"),
        ("(1 2", "a parenthesis is not closed"),
        ("2 * )", r"unexpected '\)'"),
        ("2 3", "unexpected '3' after a complete expression"),
        ("2 + 3 $", r"unexpected character '\$' at position 6"),
        ("1" * (MAX_CHARS + 1), f"the expression is longer than {MAX_CHARS} characters"),
    ],
)
def test_each_refusal_tells_the_model_what_is_wrong(expression: str, says: str) -> None:
    """A ToolFailure's message is all the model sees of its mistake: that sentence and no other."""
    with pytest.raises(ToolFailure, match=f"^{says}$"):
        evaluate(expression)


def test_ordinary_forms_evaluate() -> None:
    """Trailing blanks, a leading plus, a bare decimal point and a product with 0 are arithmetic."""
    assert evaluate("2 + 3   ") == 5
    assert evaluate("+3") == 3 and evaluate("-(-3)") == 3
    assert evaluate(".5 + 1") == Fraction(3, 2)
    assert evaluate("5 * 0") == 0
    longest = "1" + "+1" * ((MAX_CHARS - 2) // 2) + " "
    assert len(longest) == MAX_CHARS and evaluate(longest) == MAX_CHARS // 2


def _nested(depth: int) -> str:
    return "(" * depth + "1" + ")" * depth


@pytest.mark.parametrize("before", ["", "(1) + ", "-1 + ", "2^1 + "])
def test_nesting_depth_is_counted_per_level_not_per_group(before: str) -> None:
    """Groups that closed earlier (parentheses, signs, exponents) free their level: 32 levels
    are allowed after any number of them, 33 never."""
    assert evaluate(before * 8 + _nested(MAX_DEPTH)) == 8 * _sign(before) + 1
    with pytest.raises(ToolFailure, match=f"nests deeper than {MAX_DEPTH} levels"):
        evaluate(before + _nested(MAX_DEPTH + 1))


def _sign(before: str) -> int:
    """The value each ``before`` group adds."""
    return {"": 0, "(1) + ": 1, "-1 + ": -1, "2^1 + ": 2}[before]


def test_show_gives_signed_decimals_without_a_dangling_point() -> None:
    """Negative fractions keep their sign; a value that rounds to a whole number at 6 places is
    shown as that number ("2", not "2."), and one that rounds to zero as "0", not "-0"."""
    assert show(Fraction(-7, 2)) == "-3.5" and show(Fraction(-2, 3)) == "-0.666667"
    assert show(2 + Fraction(1, 10**7)) == "2"
    assert show(Fraction(-1, 10**7)) == "0"


# --------------------------------------------------------------------------- parsing
def _call(arguments: str) -> str:
    return f'<tool_call>{{"name": "t", "arguments": {arguments}}}</tool_call>'


def test_arguments_limits_and_empty_forms() -> None:
    """MAX_ARGUMENTS keys are allowed, one more is refused; an empty string means no arguments;
    a wrong type is named so the model can fix it."""
    keys = {f"k{i}": i for i in range(MAX_ARGUMENTS)}
    assert parse_action(_call(json.dumps(keys))) == ToolCall("t", keys)
    too_many = parse_action(_call(json.dumps({**keys, "extra": 0})))
    assert isinstance(too_many, ToolError) and f"{MAX_ARGUMENTS + 1} keys (at most {MAX_ARGUMENTS})" in too_many.message
    assert parse_action(_call('""')) == ToolCall("t", {})
    wrong = parse_action(_call("[1]"))
    assert isinstance(wrong, ToolError) and "must be a JSON object, got list" in wrong.message
    stringly = parse_action(_call('"key=a"'))
    assert isinstance(stringly, ToolError) and stringly.message == f'"arguments" is a string that is not a JSON object. {FORMAT_HINT}'


def test_a_call_of_exactly_the_size_cap_parses() -> None:
    """MAX_CALL_CHARS is the largest call accepted; the refusal says how long the call was."""
    head, tail = '{"name": "t", "arguments": {"s": "', '"}}'
    block = head + "x" * (MAX_CALL_CHARS - len(head) - len(tail)) + tail
    assert len(block) == MAX_CALL_CHARS
    assert isinstance(parse_action(f"<tool_call>{block}</tool_call>"), ToolCall)
    over = parse_action(f"<tool_call>{block} </tool_call>".replace('"}}', '"} }'))
    assert isinstance(over, ToolError) and f"{MAX_CALL_CHARS + 1} characters long (at most {MAX_CALL_CHARS})" in over.message


def test_fences_without_newlines_are_unwrapped() -> None:
    """Small models write ```{...}``` and ```json{...}``` on one line too."""
    assert parse_action('<tool_call>```{"name": "list_keys"}```</tool_call>') == ToolCall("list_keys", {})
    assert parse_action('<tool_call>```json{"name": "list_keys"}```</tool_call>') == ToolCall("list_keys", {})


def test_a_turn_of_exactly_the_text_cap_parses() -> None:
    text = "<answer>1</answer>"
    assert parse_action(text + " " * (MAX_TEXT - len(text))) == Answer("1")


def test_only_text_after_the_last_think_counts() -> None:
    """Tags inside the reasoning, however it ends, are not the turn's action."""
    assert parse_action("<think>I will reply with <answer></think><answer>4</answer>") == Answer("4")
    assert parse_action("<think>a</think><think>b <answer>1</answer></think><answer>2</answer>") == Answer("2")


def test_errors_count_the_calls_and_quote_the_json_problem() -> None:
    """The model is told how many calls it made and where its JSON broke."""
    calls = parse_action('<tool_call>{"name": "a"}</tool_call>' * 3)
    assert isinstance(calls, ToolError) and calls.message.startswith("3 tool calls in one turn")
    answers = parse_action("<answer>1</answer><answer>2</answer>")
    assert answers == ToolError("more than one <answer> in a turn; give exactly one final answer.")
    broken = parse_action("<tool_call>{name: calculate}</tool_call>")
    assert isinstance(broken, ToolError) and "Expecting property name enclosed in double quotes" in broken.message


# --------------------------------------------------------------------------- schema
def test_param_limits_include_their_bounds() -> None:
    """maxLength, minimum and maximum are inclusive, as in JSON Schema."""
    assert Param("string", "s", max_length=3).problem("abc") is None
    number = Param("integer", "n", minimum=0, maximum=9)
    assert number.problem(0) is None and number.problem(9) is None
    assert number.problem(-1) == "must be >= 0" and number.problem(10) == "must be <= 9"
    assert number.problem("1") == "must be a integer, got str"


def test_declaration_is_the_exact_openai_function_schema() -> None:
    """What the chat template renders for the model: every key is one the format defines."""
    tool = Tool("pick", "pick a number", {"n": Param("number", "n", minimum=1, maximum=5)})
    assert tool.declaration() == {
        "type": "function",
        "function": {
            "name": "pick",
            "description": "pick a number",
            "parameters": {
                "type": "object",
                "properties": {"n": {"type": "number", "description": "n", "minimum": 1, "maximum": 5}},
                "required": ["n"],
                "additionalProperties": False,
            },
        },
    }


def test_an_unknown_argument_error_lists_the_real_ones() -> None:
    two = Tool("t", "t", {"a": Param("string", "a"), "b": Param("string", "b")})
    assert two.problem({"x": "1"}) == "t has no argument 'x' (arguments: a, b)"
    assert Tool("list_keys", "l").problem({"x": "1"}) == "list_keys has no argument 'x' (arguments: none)"


# --------------------------------------------------------------------------- tasks
@pytest.mark.parametrize("text, value", [("$12", 12), (".5", Fraction(1, 2)), ("7..", 7), ("1,234.50", Fraction(2469, 2)), ("9" * 64, int("9" * 64))])
def test_numbers_as_models_write_them(text: str, value: Fraction) -> None:
    assert as_number(text) == value


@pytest.mark.parametrize("text", ["1" * 65, "12X", "", "$", "twelve"])
def test_what_is_not_a_number(text: str) -> None:
    """Over 64 characters is not parsed at all (bounded work); junk is compared as text."""
    assert as_number(text) is None


def test_tools_are_found_by_name() -> None:
    assert kv.tool("set") is kv.tools[2] and calculator.tool("calculate") is calculator.tools[0]
    assert kv.tool("drop_table") is None


def _fingerprint(task: Task, seeds: range, tmp: Path) -> str:
    """sha256 over the instances of ``seeds``: prompt, truth, first state and (sql) the database."""
    h = hashlib.sha256()
    for seed in seeds:
        scratch = tmp / f"{task.name}-{seed}" if task.needs_scratch else None
        if scratch is not None:
            scratch.mkdir()
        s = task.setup(seed, scratch)
        h.update(json.dumps([s.prompt, s.truth, s.state], sort_keys=True).encode())
        if task is sql and scratch is not None:
            with sqlite3.connect(scratch / DB) as db:
                h.update("\n".join(db.iterdump()).encode())
            db.close()
    return h.hexdigest()[:16]


def test_task_instances_are_fixed_by_the_seed_across_releases(tmp_path: Path) -> None:
    """Peers rebuild a task (question, truth, database) from its seed alone, so the seed ->
    instance map is part of the swarm protocol: peers on two builds must agree on it. A change
    here is deliberate and breaks compatibility; update these values only with that in mind."""
    first = calculator.setup(0, None)
    assert (first.prompt, first.truth) == ("What is 690 - (120 - 633)? Use the calculate tool, then give the number as <answer>...</answer>.", "1203")
    # many seeds: a change that alters only the rare seed (a range's top value drawn) still splits peers
    assert _fingerprint(calculator, range(1000), tmp_path) == "2c4d677fac53a7a7"
    assert _fingerprint(kv, range(10_000), tmp_path) == "dac23c193f70dd1d"
    assert _fingerprint(sql, range(40), tmp_path) == "402d34839104105e"
    assert _fingerprint(probe, range(1), tmp_path) == "db1622940ca82a6b"
    assert len({calculator.setup(seed, None).prompt for seed in range(10)}) == 10  # a new question per seed


def test_kvstore_tools_report_what_they_did() -> None:
    """The model reads each tool's result: the new value, the deletion, an empty listing."""
    assert kv.call("set", {"key": "a", "value": "1"}, {}, None).content == "a = 1"
    assert kv.call("delete", {"key": "a"}, {"a": "1"}, None).content == "deleted a"
    assert kv.call("list_keys", {}, {}, None).content == "(empty)"


def test_the_sql_budget_interrupts_after_exactly_its_ticks() -> None:
    tick = _budget(3)
    assert [tick() for _ in range(5)] == [0, 0, 0, 1, 1]


def _query(scratch: Path, query: str) -> str:
    return sql.call("execute_sql", {"query": query}, None, scratch).content


def _counting(n: int) -> str:
    return f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n}) SELECT x, NULL AS y FROM c"


def test_sql_results_are_tables_the_model_can_read(tmp_path: Path) -> None:
    """Header, NULLs as NULL, an empty result said so, and a note only when rows were cut."""
    sql.setup(0, tmp_path)
    assert _query(tmp_path, _counting(2)) == "x | y\n1 | NULL\n2 | NULL"
    assert _query(tmp_path, "SELECT name FROM employees WHERE salary < 0") == "name\n(no rows)"
    full = _query(tmp_path, _counting(MAX_ROWS)).split("\n")
    assert len(full) == MAX_ROWS + 1 and full[-1] == f"{MAX_ROWS} | NULL"
    cut = _query(tmp_path, _counting(MAX_ROWS + 5)).split("\n")
    assert len(cut) == MAX_ROWS + 2 and cut[-2] == f"{MAX_ROWS} | NULL" and "more rows not shown" in cut[-1]


def test_sql_strings_are_capped_at_one_mebibyte(tmp_path: Path) -> None:
    """A query cannot build a string of 1.8 MB (memory in the sandbox child); 100 kB is fine."""
    sql.setup(0, tmp_path)
    assert _query(tmp_path, "SELECT length(printf('%100000d', 1)) AS n") == "n\n100000"
    with pytest.raises(ToolFailure, match="too big"):
        _query(tmp_path, "SELECT length(replace(printf('%900000d', 1), ' ', 'ab'))")  # 1.8 MB


# --------------------------------------------------------------------------- sandbox probe
def test_probe_hangs_last_as_long_as_asked() -> None:
    """sleep and spin must really hold the child for the time asked: the sandbox tests rely on it."""
    for tool in ("sleep", "spin"):
        started = time.monotonic()
        assert probe.call(tool, {"seconds": 0.05}, None, None).content == "done"
        assert time.monotonic() - started >= 0.05


def test_probe_tools_do_what_they_say(tmp_path: Path) -> None:
    assert probe.call("echo", {"text": "hi"}, None, None).content == "hi"
    assert probe.call("allocate", {"megabytes": 2}, None, None).content == "allocated 2 MiB"
    assert probe.call("pid", {}, None, None).content == str(os.getpid())
    (tmp_path / "long.txt").write_text("a" * 150 + "b" * 150)
    assert probe.call("read_file", {"path": str(tmp_path / "long.txt")}, None, None).content == "a" * 150 + "b" * 50
    assert probe.call("write_scratch", {"text": "note"}, None, tmp_path).content == f"wrote {tmp_path / 'note.txt'}"
    assert (tmp_path / "note.txt").read_text() == "note"
    assert probe.reward("OK", "ok", None) == 1.0 and probe.reward("no", "ok", None) == 0.0


def test_probe_connect_reaches_a_listening_port() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert probe.call("connect", {"host": "127.0.0.1", "port": port}, None, None).content == "connected"


def test_probe_crash_kills_the_process_running_it() -> None:
    """In a forked child (no core file): the crash tool must end it by SIGABRT, not return."""
    assert probe.call("pid", {}, None, None).content == str(os.getpid())  # other tools return, in this process
    pid = os.fork()
    if pid == 0:
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            faulthandler.disable()  # no traceback dump on the expected abort
            probe.call("crash", {}, None, None)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGABRT
