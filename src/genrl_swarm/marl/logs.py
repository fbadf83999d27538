"""marl-eval's JSON format: per evaluation step, absolute metrics per environment, task, seed.

marl-eval (Gorsane et al., 2022) aggregates files shaped
``{env: {task: {algorithm: {"seed_N": {"step_K": {"step_count": .., "return": [per episode]},
"absolute_metrics": {"return": [...]}}}}}}``; one file per run (peer), merged by its
``concatenate_json_files``. The file is rewritten whole after each evaluation (atomic rename):
a run stopped at any point leaves valid JSON.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class MarlEvalLog:
    path: Path
    env_name: str
    task_name: str
    algorithm: str
    seed: int
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    absolute: dict[str, list[float]] | None = None
    started: float = field(default_factory=time.monotonic)

    def record(self, step_count: int, returns: Sequence[float], **extra: float) -> None:
        """One evaluation: the return of each evaluation episode after ``step_count`` steps."""
        row = {"step_count": int(step_count), "elapsed_time": time.monotonic() - self.started, "return": [float(x) for x in returns]}
        self.steps[f"step_{len(self.steps)}"] = row | {k: float(v) for k, v in extra.items()}
        self.write()

    def record_absolute(self, returns: Sequence[float]) -> None:
        """The final policy's score over many episodes (Mava: 10x the evaluation episodes)."""
        self.absolute = {"return": [float(x) for x in returns]}
        self.write()

    def document(self) -> dict[str, Any]:
        run: dict[str, Any] = dict(self.steps)
        if self.absolute is not None:
            run["absolute_metrics"] = self.absolute
        return {self.env_name: {self.task_name: {self.algorithm: {f"seed_{self.seed}": run}}}}

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(self.document(), indent=1))
        os.replace(tmp, self.path)
