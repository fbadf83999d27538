"""Reasoning Gym's scorers for the SAPO datasets, rewritten here so they can run in-process.

Each function gives what that dataset's ``score_answer`` gives on the answers an honest model
writes (``tests/test_scoring_exact.py`` compares them over thousands of generated entries and
answer variants), with two differences on purpose: ``binary_matrix`` reads a list of lists with a
parser written here instead of Python's ``eval`` (Reasoning Gym's scorer runs any expression a
sender writes), and ``decimal_arithmetic`` takes the recipe's own dataset config, not the
default one. Every step is linear in the answer's length, and numbers are bounded before they
are parsed (``int("9" * 4300)`` is the interpreter's own cap; ``Decimal`` gets at most 100
characters and a 3-digit exponent).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

Entry = Mapping[str, Any]


def default(answer: str | None, entry: Entry) -> float:
    """Reasoning Gym's base rule: 1 for the oracle answer, ``len(oracle)/len(answer)`` when the
    answer contains it, else 0 (arc_1d, basic_arithmetic, base_conversion, bf)."""
    oracle = entry["answer"]
    if not isinstance(answer, str) or not answer:
        return 0.0
    if answer == oracle:
        return 1.0
    return len(oracle) / len(answer) if oracle in answer else 0.0


#: Longest list text read as a matrix: Reasoning Gym's matrices are at most 10 x 10 (a few hundred
#: characters); the row loop copies the rest of the text per row, so its cost is bounded here.
MAX_MATRIX_CHARS = 4096
_CELL = re.compile(r"\s*([+-]?\d{1,20})\s*")


def _matrix(text: str) -> str | None:
    """``[[1, 0], [0, 1]]`` (lists or tuples, a trailing comma allowed) as Reasoning Gym prints a
    matrix ("1 0\\n0 1"), or None for anything else. Replaces ``eval`` on the answer."""
    text = text.strip()
    if not 2 <= len(text) <= MAX_MATRIX_CHARS or text[0] + text[-1] not in ("[]", "()"):
        return None
    inner, rows = text[1:-1].strip(), []
    while inner:
        if inner[0] not in "[(":
            return None
        close = inner.find("]" if inner[0] == "[" else ")")
        if close < 0:
            return None
        cells = inner[1:close].split(",")
        if cells and not cells[-1].strip():
            cells.pop()  # a trailing comma
        matches = [_CELL.fullmatch(c) for c in cells]
        if not all(matches) or any(m.group(1).lstrip("+-").startswith("0") and len(m.group(1).lstrip("+-")) > 1 for m in matches if m):
            return None  # "01" is a SyntaxError in Python
        rows.append(" ".join(str(int(m.group(1))) for m in matches if m))
        inner = inner[close + 1 :].lstrip()
        if inner.startswith(","):
            inner = inner[1:].lstrip()
        elif inner:
            return None
    return "\n".join(rows)


def binary_matrix(answer: str | None, entry: Entry) -> float:
    oracle = entry["answer"]
    if answer is None:
        return 0.0
    if answer == oracle:
        return 1.0
    return 0.1 if _matrix(answer) == oracle else 0.0


_WEEKDAYS = frozenset({"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"})
_WEEKDAY_TASKS = frozenset({"weekday_offset", "weekday_of_date_from_first_date", "weekday_of_date"})
_COUNT_TASKS = frozenset({"count_business_days", "count_days", "recurring_event_day"})


def _int(text: str) -> int | None:
    """``int(text)`` as Python reads it (spaces, a sign, underscores between digits), or None."""
    try:
        return int(text)
    except ValueError:
        return None


def calendar_arithmetic(answer: str | None, entry: Entry) -> float:
    if not isinstance(answer, str) or not answer:
        return 0.0
    oracle, task = entry["answer"], entry["metadata"]["task"]
    if task in _WEEKDAY_TASKS:
        answer = answer.strip()
        if answer == oracle:
            return 1.0
        if answer in _WEEKDAYS:
            return 0.1
        return 0.05 if answer.title() in _WEEKDAYS else 0.0
    if task in _COUNT_TASKS:
        got, want = _int(answer.strip()), _int(oracle.strip())
        if got is None or want is None:
            return 0.0
        if want == 0:
            return 1.0 if got == 0 else 0.0
        try:
            return max(0.0, math.exp(-5 * abs(got - want) / want))
        except OverflowError:  # a 300-digit answer: far off
            return 0.0
    if task == "is_leap_year":
        return 1.0 if answer.strip().lower() == oracle.lower() else 0.0
    return 0.0


_DECIMAL = re.compile(r"\s*[+-]?(\d[\d_]{0,99}(\.[\d_]{0,99})?|\.[\d_]{1,99})([eE][+-]?\d{1,3})?\s*")


def decimal_arithmetic(answer: str | None, entry: Entry, config: Mapping[str, Any] | None = None) -> float:
    """1 within one unit of the last of ``max_num_decimal_places`` (the recipe's config; Reasoning
    Gym's default of 3 when it sets none), else 0."""
    if not isinstance(answer, str) or len(answer) > 200 or not _DECIMAL.fullmatch(answer):
        return 0.0
    places = int((config or {}).get("max_num_decimal_places", 3))
    with localcontext() as ctx:
        ctx.prec = 28
        try:
            return 1.0 if abs(Decimal(answer) - Decimal(entry["answer"])) <= Decimal(10) ** (-places) else 0.0
        except (InvalidOperation, ValueError):
            return 0.0


_LATEX_FRACTION = re.compile(r"\\(?:frac|dfrac)\s*{\s*(\d+)\s*}\s*{\s*(\d+)\s*}", re.IGNORECASE)


def _fraction(answer: str) -> tuple[int, int] | None:
    cleaned = answer.strip().strip("$").strip()
    latex = _LATEX_FRACTION.match(cleaned)
    if latex:
        return _int(latex.group(1)), _int(latex.group(2))  # type: ignore[return-value]
    if "/" in cleaned:
        top, bottom = (_int(part.strip()) for part in cleaned.split("/", 1))
        return None if top is None or bottom is None else (top, bottom)
    return None


def fraction_simplification(answer: str | None, entry: Entry) -> float:
    meta = entry["metadata"]
    parsed = _fraction(answer) if isinstance(answer, str) else None
    if parsed is None or None in parsed:
        return 0.01
    top, bottom = parsed
    if top == meta["simplified_numerator"] and bottom == meta["simplified_denominator"]:
        return 1.0
    if top == meta["numerator"] or bottom == meta["denominator"]:
        return 0.1
    return 0.05 if answer and answer.strip() else 0.01


Exact = Callable[..., float]

#: Dataset -> scorer written here; every other dataset's scorer runs in the scorer sandbox.
EXACT: dict[str, Exact] = {
    "arc_1d": default,
    "basic_arithmetic": default,
    "base_conversion": default,
    "bf": default,
    "binary_matrix": binary_matrix,
    "calendar_arithmetic": calendar_arithmetic,
    "decimal_arithmetic": decimal_arithmetic,
    "fraction_simplification": fraction_simplification,
}
#: Scorers that read the recipe's dataset config.
CONFIGURED = frozenset({"decimal_arithmetic"})
