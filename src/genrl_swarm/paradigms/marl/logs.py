"""marl-eval's JSON format, with Mava's names, so our runs and Mava's aggregate together.

marl-eval (Gorsane et al., 2022) reads files shaped
``{env: {task: {algorithm: {"seed_N": {"step_K": {...}, "absolute_metrics": {...}}}}}}``, one file
per run (peer), merged by its ``concatenate_json_files``; its ``data_process_pipeline`` and
``create_matrices_for_rliable`` need every run of an environment to carry the same metrics. So we
write what Mava writes (its ``JsonLogger`` writes through marl-eval's):

- environment ``LevelBasedForaging`` / ``RobotWarehouse`` (Mava's names, not jumanji's ids
  ``LevelBasedForaging-v0``), task = the scenario (``2s-8x8-2p-2f-coop``), algorithm
  ``ff_ippo`` / ``ff_mappo`` (feed-forward IPPO/MAPPO, Mava's system names);
- per evaluation ``step_K`` (K from 0): ``step_count`` (this peer's environment steps),
  ``elapsed_time`` (seconds since the first evaluation, so 0 at ``step_0``: compilation is not
  counted, as marl-eval's logger does) and ``mean_episode_return: [mean]``;
- ``absolute_metrics``: ``mean_episode_return: [mean]`` of the final policy on 10x the episodes.

Each step also keeps ``episode_returns`` (the return of every evaluation episode; marl-eval only
averages it, and the report draws its spread); ``absolute_metrics`` holds Mava's key only, since
marl-eval takes the metric list of its matrices from there. The file is rewritten whole after
each evaluation (atomic rename): a run stopped at any point leaves valid JSON.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: jumanji's environment ids -> the names Mava logs them under.
MAVA_ENV = {"LevelBasedForaging-v0": "LevelBasedForaging", "RobotWarehouse-v0": "RobotWarehouse"}
#: our system names -> Mava's (feed-forward networks, which ours are).
MAVA_ALGORITHM = {"ippo": "ff_ippo", "mappo": "ff_mappo"}
METRIC = "mean_episode_return"
EPISODES = "episode_returns"


@dataclass
class MarlEvalLog:
    path: Path
    env_name: str  # a jumanji id or Mava's name
    task_name: str
    algorithm: str  # ippo/mappo or any other label (kept as given)
    seed: int
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    absolute: dict[str, list[float]] | None = None
    started: float | None = None  # the first evaluation's monotonic time

    def __post_init__(self) -> None:
        self.env_name = MAVA_ENV.get(self.env_name, self.env_name)
        self.algorithm = MAVA_ALGORITHM.get(self.algorithm, self.algorithm)

    def record(self, step_count: int, returns: Sequence[float], **extra: float) -> None:
        """One evaluation: the return of each evaluation episode after ``step_count`` steps."""
        now = time.monotonic()
        if self.started is None:
            self.started = now
        episodes = [float(x) for x in returns]
        row = {"step_count": int(step_count), "elapsed_time": now - self.started, METRIC: [_mean(episodes)], EPISODES: episodes}
        self.steps[f"step_{len(self.steps)}"] = row | {k: float(v) for k, v in extra.items()}
        self.write()

    def record_absolute(self, returns: Sequence[float]) -> None:
        """The final policy's score over many episodes (Mava: 10x the evaluation episodes)."""
        self.absolute = {METRIC: [_mean([float(x) for x in returns])]}
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


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def episode_returns(step: dict[str, Any]) -> list[float]:
    """An evaluation step's episode returns: ours (every episode), Mava's (only the mean), or
    this project's files from before the Mava names (``return``)."""
    for key in (EPISODES, "return", METRIC):
        if key in step:
            return [float(x) for x in step[key]]
    raise KeyError(f"no episode returns in {sorted(step)}")
