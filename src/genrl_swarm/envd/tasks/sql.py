"""SQL: answer a question about an sqlite database built from the seed (AgentBench DB style).

The database lives in the session's scratch directory. The model's queries run read-only, under
an authorizer that allows reading and nothing else (no ATTACH, no PRAGMA, no writes, no SQL
function outside ``ALLOWED_FUNCTIONS``), with a cap on the work per query and on string sizes. The ground truth is a fixed query on the same
database, so any peer rebuilds it from the seed alone.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from genrl_swarm.envd.schema import Param, Tool
from genrl_swarm.envd.tasks.base import Outcome, Setup, Task, ToolFailure, same_answer

DB = "task.db"
FIRST = "Ada Ben Cleo Dev Eli Fay Gus Hana Ivo Jin Kai Lena Milo Nia Otto Pia Quin Rosa Sam Tess".split()
LAST = "Abe Berg Cruz Diaz Eng Fox Gray Hill Ito Jones Khan Lund Mora Nash Ortiz Park".split()
DEPARTMENTS = ("Sales", "Engineering", "Support", "Finance", "Legal")
SCHEMA = (
    "employees(id INTEGER, name TEXT, department TEXT, salary INTEGER, hired INTEGER)",
    "departments(name TEXT, floor INTEGER)",
)
MAX_ROWS = 30
MAX_VM_STEPS = 5_000  # progress-handler ticks of 1000 sqlite instructions: a runaway query is cut
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, getattr(sqlite3, "SQLITE_RECURSIVE", 33)}

#: (question template, truth query); both take the same named parameters.
QUESTIONS: tuple[tuple[str, str], ...] = (
    ("How many employees work in the {dept} department?", "SELECT COUNT(*) FROM employees WHERE department = :dept"),
    ("What is the total salary of the {dept} department?", "SELECT SUM(salary) FROM employees WHERE department = :dept"),
    ("Who is the highest-paid employee of the {dept} department? Answer with the full name.",
     "SELECT name FROM employees WHERE department = :dept ORDER BY salary DESC LIMIT 1"),
    ("How many employees of the {dept} department were hired after {year}?",
     "SELECT COUNT(*) FROM employees WHERE department = :dept AND hired > :year"),
    ("How many employees work on floor {floor}?",
     "SELECT COUNT(*) FROM employees e JOIN departments d ON e.department = d.name WHERE d.floor = :floor"),
)  # fmt: skip


#: The SQL functions a question about the database needs; any other (fts3_tokenizer, which leaks
#: a native pointer and registers a tokenizer at a caller-chosen address; load_extension;
#: sqlite_* introspection; randomblob/zeroblob) is refused by the authorizer.
ALLOWED_FUNCTIONS = frozenset(
    # aggregates
    "count sum total avg min max group_concat string_agg".split()
    # window functions
    + "row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value nth_value".split()
    # numbers
    + "abs round sign ceil ceiling floor trunc mod pow power sqrt exp ln log log10 log2 pi random".split()
    # text
    + "length octet_length lower upper substr substring trim ltrim rtrim instr replace like glob printf format".split()
    + "concat concat_ws char unicode hex quote".split()
    # nulls, types, conditions
    + "coalesce ifnull nullif iif typeof likely unlikely likelihood".split()
    # dates and times
    + "date time datetime julianday unixepoch strftime timediff".split()
)


def _read_only(action: int, arg1: str | None, arg2: str | None, *_: Any) -> int:
    if action == sqlite3.SQLITE_FUNCTION:  # arg2: the function's name
        return sqlite3.SQLITE_OK if (arg2 or "").lower() in ALLOWED_FUNCTIONS else sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY


def _table(cursor: sqlite3.Cursor) -> str:
    rows = cursor.fetchmany(MAX_ROWS + 1)
    header = " | ".join(d[0] for d in cursor.description or ())
    lines = [header, *(" | ".join("NULL" if v is None else str(v) for v in row) for row in rows[:MAX_ROWS])]
    more = f"\n(more rows not shown; at most {MAX_ROWS})" if len(rows) > MAX_ROWS else ""
    return ("\n".join(lines) if rows else f"{header}\n(no rows)") + more


class Sql(Task):
    name = "sql"
    summary = "question about a seeded sqlite database, answered by querying it"
    needs_scratch = True
    tools = (
        Tool(
            "execute_sql",
            "Run one read-only SQL query (SQLite) on the database and return up to 30 rows.",
            {"query": Param("string", "a SELECT statement", max_length=2000)},
        ),
    )

    def setup(self, seed: int, scratch: Path | None) -> Setup:
        assert scratch is not None, "the sql task needs a scratch directory"
        rng = self.rng(seed, self.name)
        floors = {d: rng.randint(1, 4) for d in DEPARTMENTS}
        salaries = rng.sample(range(30_000, 160_000, 500), rng.randint(20, 36))  # distinct: one top earner
        people = [(i + 1, f"{rng.choice(FIRST)} {rng.choice(LAST)}", rng.choice(DEPARTMENTS), s, rng.randint(2010, 2024))
                  for i, s in enumerate(salaries)]  # fmt: skip
        with sqlite3.connect(scratch / DB) as db:
            db.executescript("".join(f"CREATE TABLE {t};" for t in SCHEMA))
            db.executemany("INSERT INTO employees VALUES (?, ?, ?, ?, ?)", people)
            db.executemany("INSERT INTO departments VALUES (?, ?)", floors.items())
            params = {
                "dept": rng.choice(sorted({p[2] for p in people})),
                "year": rng.randint(2012, 2022),
                "floor": rng.choice(sorted(set(floors.values()))),
            }
            template, truth_query = QUESTIONS[rng.randrange(len(QUESTIONS))]
            truth = db.execute(truth_query, params).fetchone()[0]
        db.close()
        prompt = (
            f"The SQLite database has the tables {' and '.join(SCHEMA)}. {template.format(**params)} "
            "Query it with the execute_sql tool, then give the answer as <answer>...</answer>."
        )
        return Setup(prompt, str(truth))

    def call(self, tool: str, arguments: dict[str, Any], state: Any, scratch: Path | None) -> Outcome:
        assert scratch is not None
        db = sqlite3.connect(f"file:{scratch / DB}?mode=ro", uri=True)
        try:
            db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1 << 20)
            db.set_authorizer(_read_only)
            db.set_progress_handler(_budget(MAX_VM_STEPS), 1000)
            return Outcome(_table(db.execute(arguments["query"])))
        except sqlite3.Error as e:
            raise ToolFailure(f"SQL error: {e}") from None
        finally:
            db.close()

    def reward(self, answer: str, truth: str, state: Any) -> float:
        return float(same_answer(answer, truth))


def _budget(ticks: int) -> Callable[[], int]:
    """A progress handler that interrupts a query after ``ticks`` calls (a runaway recursive CTE)."""
    left = [ticks]

    def tick() -> int:
        left[0] -= 1
        return int(left[0] < 0)

    return tick
