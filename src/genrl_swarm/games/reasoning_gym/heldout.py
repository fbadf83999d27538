"""Greedy held-out evaluation with accuracy and format apart, before training and during it.

Why not the game's ``eval/reward``: it is one number, accuracy and format bonus summed, and
the game evaluates only after training rounds, so a run has no starting value to compare with.
``HeldOutEval`` scores the data's held-out split with greedy decoding before round 0 and after
every ``every`` rounds (and the last), keeping accuracy and format (one ``<answer>`` block)
separate. Its scores join the metrics row of the round they follow (``heldout/accuracy``,
``heldout/format``; the evaluation before training in each peer's first row as ``..._before``),
so metrics.jsonl, the trackers and the dashboard hold the number the demo prints.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from genrl_swarm.core import Policy, Task
from genrl_swarm.core.game import GameManager
from genrl_swarm.core.types import RoundResult
from genrl_swarm.paradigms.lm.answers import well_formatted
from genrl_swarm.rewards.reasoning import accuracy


@dataclass(frozen=True)
class Score:
    """Mean greedy accuracy and format rate over ``n`` held-out tasks."""

    accuracy: float
    format: float
    n: int

    def metrics(self, suffix: str = "") -> dict[str, float]:
        """The score as a metrics row's scalars."""
        return {f"heldout/accuracy{suffix}": self.accuracy, f"heldout/format{suffix}": self.format}


def score_texts(tasks: Sequence[Task], texts: Sequence[str]) -> Score:
    """Accuracy (the reward's own scorer) and format rate of one completion per task."""
    if len(tasks) != len(texts):
        raise ValueError(f"{len(tasks)} tasks but {len(texts)} completions")
    if not tasks:
        return Score(0.0, 0.0, 0)
    acc = sum(accuracy(t, x) for t, x in zip(tasks, texts))
    fmt = sum(float(well_formatted(x)) for x in texts)
    return Score(acc / len(tasks), fmt / len(tasks), len(tasks))


def evaluate(policy: Policy, tasks: Sequence[Task]) -> Score:
    """One greedy completion per held-out task (stage 0), scored."""
    inputs = [t.input(0) for t in tasks]
    bodies = policy.act(inputs, 0, greedy=True) if inputs else []
    texts = [policy.texts(b)[0] for b in bodies]
    return score_texts(tasks, texts)


@dataclass
class HeldOutEval:
    """``after_round`` hook: ``scores[peer]`` is a list of (rounds trained, Score); call
    ``before`` on a manager ahead of the run for the starting value (every peer starts from the
    same weights: one peer's is the swarm's). Placed before the checkpoint and metrics hooks, it
    adds its scores to the round's ``result.metrics`` (``run.metrics``)."""

    every: int
    max_rounds: int
    peers: int = 1  # with ``stream``: print a point's mean once this many peers reached it
    stream: TextIO | None = None
    scores: dict[str, list[tuple[int, Score]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _start: Score | None = None
    _first_rows: set[str] = field(default_factory=set)  # peers whose first row has the start score

    def before(self, manager: GameManager) -> Score:
        self._start = self._record(manager, 0)
        return self._start

    def __call__(self, manager: GameManager, result: RoundResult) -> None:
        if self._start is not None and result.peer_id not in self._first_rows:
            self._first_rows.add(result.peer_id)
            result.metrics.update(self._start.metrics("_before"))
        done = result.round + 1
        if done == self.max_rounds or (self.every > 0 and done % self.every == 0):
            result.metrics.update(self._record(manager, done).metrics())

    def _record(self, manager: GameManager, rounds: int) -> Score:
        score = evaluate(manager.policy, manager.data.eval_tasks())
        with self._lock:
            self.scores.setdefault(manager.peer_id, []).append((rounds, score))
            point = [s for rows in self.scores.values() for r, s in rows if r == rounds]
            if self.stream is not None and rounds > 0 and len(point) == self.peers:
                acc, fmt = (sum(getattr(s, k) for s in point) / len(point) for k in ("accuracy", "format"))
                print(
                    f"held-out after {rounds} rounds (greedy, mean over {len(point)} peers): accuracy {acc:.3f}, format {fmt:.3f}",
                    file=self.stream,
                    flush=True,
                )
        return score

    def table(self) -> list[tuple[int, float, float]]:
        """(rounds trained, accuracy, format) averaged over peers, per evaluation point every peer
        finished: a stop cuts a point short on some peers, and their mean is not the swarm's. The
        point before training is one peer's (every peer starts from the same weights)."""
        points: dict[int, list[Score]] = {}
        for rows in self.scores.values():
            for rounds, score in rows:
                points.setdefault(rounds, []).append(score)
        done = {r: v for r, v in points.items() if r == 0 or len(v) == self.peers}
        return [(r, sum(s.accuracy for s in v) / len(v), sum(s.format for s in v) / len(v)) for r, v in sorted(done.items())]
