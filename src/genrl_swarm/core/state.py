"""GameState: what a round has produced so far, on this peer and from the swarm."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from genrl_swarm.core.types import Rollout, Task


@dataclass
class GameState:
    """The record of one round, queryable by stage, task and peer.

    ``tasks`` holds the round's questions by id (the ground truth rewards are computed
    against); ``inputs`` what this peer was prompted with in each stage; ``rollouts`` every
    rollout recorded, this peer's own and the swarm's, in arrival order.
    """

    round: int
    peer_id: str
    tasks: dict[str, Task] = field(default_factory=dict)
    inputs: dict[int, list[Task]] = field(default_factory=dict)
    rollouts: list[Rollout] = field(default_factory=list)

    def set_tasks(self, tasks: Iterable[Task]) -> None:
        self.tasks = {t.id: t for t in tasks}

    def record(self, stage: int, inputs: Sequence[Task], by_peer: Mapping[str, Sequence[Rollout]]) -> None:
        """Store a stage: the prompts shown locally and every peer's rollouts (own included)."""
        self.inputs[stage] = list(inputs)
        for peer in sorted(by_peer):  # sorted: the same order on every peer
            self.rollouts.extend(r for r in by_peer[peer] if r.stage == stage)

    @property
    def stages(self) -> list[int]:
        return sorted(self.inputs)

    def select(
        self, stage: int | None = None, task: str | None = None, peer: str | None = None
    ) -> list[Rollout]:
        return [
            r
            for r in self.rollouts
            if (stage is None or r.stage == stage)
            and (task is None or r.task_id == task)
            and (peer is None or r.peer_id == peer)
        ]

    def local(self, stage: int | None = None) -> list[Rollout]:
        return self.select(stage=stage, peer=self.peer_id)

    def swarm(self, stage: int | None = None) -> list[Rollout]:
        """Rollouts of the other peers."""
        return [r for r in self.select(stage=stage) if r.peer_id != self.peer_id]

    def peers(self, stage: int | None = None) -> list[str]:
        return sorted({r.peer_id for r in self.select(stage=stage)})
