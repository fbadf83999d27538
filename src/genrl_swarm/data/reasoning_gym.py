"""Reasoning Gym tasks: a weighted mix of any of its datasets, fresh every round.

A task keeps the answer, Reasoning Gym's entry (which holds the answer too) and the dataset's
config in its private metadata, for scoring (``scoring.rg``); only the dataset name is public, so
no stage input carries the truth.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from genrl_swarm.core import DataManager, Task
from genrl_swarm.data.questions import Questions
from genrl_swarm.scoring.registry import Audit, need_sandbox
from genrl_swarm.scoring.rg import where

#: The nine specialities of the SAPO paper's swarm.
SAPO_DATASETS = (
    "arc_1d",
    "basic_arithmetic",
    "base_conversion",
    "bf",
    "binary_matrix",
    "calendar_arithmetic",
    "decimal_arithmetic",
    "fraction_simplification",
    "propositional_logic",
)


def stable_seed(*parts: object) -> int:
    """A 31-bit seed from any parts, identical in every process (unlike ``hash``)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "big") >> 1


class ReasoningGymData(DataManager):
    """Each round draws ``tasks_per_round`` questions: dataset names by weight, then that many
    fresh items per dataset. ``questions``: ``shared`` (every peer the same, from (swarm seed,
    round)) or ``per_peer`` (SAPO: each peer its own, from (swarm seed, round, peer id); a
    receiver rebuilds a sender's). Specialties, as in SAPO's heterogeneous swarm: a peer's
    dataset weights are ``peer_weights[peer id]`` when listed, else ``specialties`` datasets
    picked from its id (0: all of ``datasets``). ``eval_size`` questions per dataset (all
    datasets, whatever the specialties) form a held-out split, never served in a round."""

    def __init__(
        self,
        datasets: Mapping[str, float] | Sequence[str] = SAPO_DATASETS,
        tasks_per_round: int = 4,
        eval_size: int = 8,
        seed: int = 0,
        dataset_config: Mapping[str, Mapping[str, Any]] | None = None,
        questions: str | Questions = Questions.SHARED,
        specialties: int = 0,
        peer_weights: Mapping[str, Mapping[str, float]] | None = None,
    ) -> None:
        import reasoning_gym  # noqa: F401 - fail here, with the extra's name, not mid-round

        weights = dict(datasets) if isinstance(datasets, Mapping) else dict.fromkeys(datasets, 1.0)
        if not weights or tasks_per_round < 1 or any(w < 0 for w in weights.values()):
            raise ValueError("need at least one dataset with a non-negative weight and tasks_per_round >= 1")
        if sandboxed := [name for name in weights if where(name) is Audit.SANDBOXED]:
            need_sandbox(f"the scorer of dataset {sandboxed[0]}")
        self.questions = Questions.parse(questions)
        self.per_peer = self.questions is Questions.PER_PEER
        self.peer_weights = {peer: dict(w) for peer, w in (peer_weights or {}).items()}
        unknown = sorted({n for w in self.peer_weights.values() for n in w} - set(weights))
        if specialties < 0 or unknown:
            raise ValueError(f"specialties must be >= 0 and peer_weights may name only datasets of data.datasets (unknown: {unknown})")
        self.weights, self.tasks_per_round, self.eval_size, self.seed = weights, tasks_per_round, eval_size, seed
        self.specialties = specialties
        self.dataset_config = {k: dict(v) for k, v in (dataset_config or {}).items()}
        self._eval = self._draw(self.eval_size, "eval") if eval_size > 0 else []
        self._eval_ids = {t.id for t in self._eval}

    def weights_of(self, peer_id: str) -> dict[str, float]:
        """The dataset weights ``peer_id`` draws its questions with (its specialty)."""
        if peer_id in self.peer_weights:
            return self.peer_weights[peer_id]
        if self.specialties == 0:
            return self.weights
        names = sorted(n for n, w in self.weights.items() if w > 0)
        return dict.fromkeys(random.Random(stable_seed(self.seed, "specialty", peer_id)).sample(names, min(self.specialties, len(names))), 1.0)

    def _items(self, name: str, size: int, seed: int) -> list[Task]:
        import reasoning_gym

        try:
            dataset = reasoning_gym.create_dataset(name, size=size, seed=seed, **self.dataset_config.get(name, {}))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"reasoning-gym dataset {name!r}: {e}") from e
        return [
            Task.create(
                entry["question"],
                answer=entry["answer"],
                public={"dataset": name},
                dataset=name,
                entry=entry,
                config=self.dataset_config.get(name, {}),
            )
            for entry in dataset
        ]

    def _draw(self, per_name: int, tag: str) -> list[Task]:
        return [t for name in sorted(self.weights) if self.weights[name] > 0 for t in self._items(name, per_name, stable_seed(self.seed, tag, name))]

    def round_tasks(self, round: int) -> list[Task]:
        return self._round(self.weights, round)

    def tasks_for(self, round: int, peer_id: str) -> list[Task]:
        return self._round(self.weights_of(peer_id), round, peer_id) if self.per_peer else self._round(self.weights, round)

    def _round(self, weights: Mapping[str, float], round: int, *peer: str) -> list[Task]:
        rng = random.Random(stable_seed(self.seed, "round", round, *peer))
        names = rng.choices(list(weights), weights=list(weights.values()), k=self.tasks_per_round)
        tasks: list[Task] = []
        for name, count in sorted(Counter(names).items()):
            # Draw a few extra so held-out questions can be skipped without coming up short.
            fresh = [t for t in self._items(name, count * 2 + 2, stable_seed(self.seed, round, name, *peer)) if t.id not in self._eval_ids]
            tasks.extend(fresh[:count])
        rng.shuffle(tasks)
        return tasks

    def eval_tasks(self) -> list[Task]:
        return list(self._eval)
