"""Question/answer tables from a JSONL or Parquet file.

The answer stays in the task's private part (scoring only); the file's stem is public.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from genrl_swarm.core import DataManager, Task
from genrl_swarm.data.reasoning_gym import stable_seed


def read_table(path: Path) -> list[dict[str, object]]:
    if path.suffix == ".jsonl":
        rows = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not JSON: {e}") from e
        return rows
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise ValueError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from e
        return list(pq.read_table(path).to_pylist())
    raise ValueError(f"{path}: expected a .jsonl or .parquet file")


class FileQAData(DataManager):
    """Rows of (question, answer) from a file. Rounds walk a seeded permutation, so no row comes
    back before every row has been served; the last ``eval_size`` rows of the permutation are
    held out."""

    def __init__(
        self, path: str, question_column: str = "question", answer_column: str = "answer",
        tasks_per_round: int = 4, eval_size: int = 16, seed: int = 0,
    ) -> None:  # fmt: skip
        rows = read_table(Path(path))
        for i, row in enumerate(rows):
            if question_column not in row or answer_column not in row:
                raise ValueError(f"{path}: row {i} lacks column {question_column!r} or {answer_column!r}")
        stem = Path(path).stem
        tasks = [Task.create(str(r[question_column]), answer=str(r[answer_column]), public={"dataset": stem}, dataset=stem) for r in rows]
        random.Random(stable_seed(seed, path)).shuffle(tasks)
        if len(tasks) <= eval_size or tasks_per_round < 1:
            raise ValueError(f"{path}: {len(tasks)} rows cannot serve eval_size={eval_size} and rounds")
        self._eval, self._train = tasks[len(tasks) - eval_size :], tasks[: len(tasks) - eval_size]
        self.tasks_per_round = tasks_per_round

    def round_tasks(self, round: int) -> list[Task]:
        start = round * self.tasks_per_round
        return [self._train[(start + i) % len(self._train)] for i in range(self.tasks_per_round)]

    def eval_tasks(self) -> list[Task]:
        return list(self._eval)
