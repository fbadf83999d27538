"""One-digit arithmetic (a + b, a - b with a >= b, a * b): a task a 135M model half solves.

Why this task: on a CPU a learning benchmark gets a few dozen small GRPO steps. SmolLM2-135M
answers greedy one-digit problems right about half the time (often it talks past a short
completion budget before stating the number), so held-out accuracy starts well below its
ceiling and can move within minutes. Reasoning Gym's arithmetic at the demo's sizes starts at 0.

The 255 distinct problems are split once, by the swarm seed: ``eval_size`` of them form the
held-out split and are never served in a round, so evaluation measures problems the peers
never trained on.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from genrl_swarm.core import DataManager, Task
from genrl_swarm.data.questions import Questions
from genrl_swarm.data.reasoning_gym import stable_seed

OPS = ("+", "-", "*")


def problems(ops: Sequence[str] = OPS) -> list[tuple[int, str, int]]:
    """Every (a, op, b) with one-digit operands; subtraction only with a >= b (no negatives)."""
    unknown = set(ops) - set(OPS)
    if unknown or not ops:
        raise ValueError(f"ops must be a non-empty subset of {OPS}, got {list(ops)}")
    return [(a, op, b) for op in OPS if op in ops for a in range(10) for b in range(10) if op != "-" or a >= b]


def solve(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def make_task(a: int, op: str, b: int) -> Task:
    """The question is the whole prompt; the answer stays in the task's private part."""
    return Task.create(f"What is {a} {op} {b}?", answer=str(solve(a, op, b)), public={"dataset": "digits"}, dataset="digits")


class DigitArithmeticData(DataManager):
    """Each round serves ``tasks_per_round`` training problems drawn (without repeats within the
    round) from a seed of (swarm seed, round): peers sharing the seed get the same questions; with
    ``questions: per_peer``, of (swarm seed, round, peer id): each peer its own."""

    def __init__(
        self,
        tasks_per_round: int = 4,
        eval_size: int = 48,
        seed: int = 0,
        ops: Sequence[str] = OPS,
        questions: str | Questions = Questions.SHARED,
        peer_ops: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.per_peer = Questions.parse(questions) is Questions.PER_PEER
        self.peer_ops = {peer: tuple(o) for peer, o in (peer_ops or {}).items()}  # specialties: a peer trains on its ops only
        if any(not o or set(o) - set(ops) for o in self.peer_ops.values()):
            raise ValueError(f"peer_ops: each peer needs a non-empty subset of ops {list(ops)}, got {self.peer_ops}")
        universe = problems(ops)
        if tasks_per_round < 1 or not 0 <= eval_size <= len(universe) - tasks_per_round:
            raise ValueError(f"need tasks_per_round >= 1 and 0 <= eval_size <= {len(universe)} - tasks_per_round, "
                             f"got {tasks_per_round} and {eval_size}")  # fmt: skip
        random.Random(stable_seed(seed, "digits-split")).shuffle(universe)
        self.tasks_per_round, self.seed = tasks_per_round, seed
        self._eval = [make_task(*p) for p in universe[:eval_size]]
        self._train = universe[eval_size:]

    def round_tasks(self, round: int) -> list[Task]:
        return self._draw(round)

    def tasks_for(self, round: int, peer_id: str) -> list[Task]:
        return self._draw(round, peer_id) if self.per_peer else self._draw(round)

    def _draw(self, round: int, *peer: str) -> list[Task]:
        rng = random.Random(stable_seed(self.seed, "digits-round", round, *peer))
        ops = self.peer_ops.get(peer[0]) if peer else None
        pool = self._train if ops is None else [p for p in self._train if p[1] in ops]
        return [make_task(*p) for p in rng.sample(pool, min(self.tasks_per_round, len(pool)))]

    def eval_tasks(self) -> list[Task]:
        return list(self._eval)
