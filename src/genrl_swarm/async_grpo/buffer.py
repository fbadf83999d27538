"""The versioned rollout buffer between the rollout workers (and the swarm) and the learner.

Each entry is one scored group with the policy version that sampled it. The learner takes a
batch only when ``batch_groups`` admissible groups are there, oldest version first (they are
the closest to the bound); groups past the bound are dropped on the way (counted) or weighted
down. Pure Python: the pipeline's driver owns it, so nothing in it can die with an actor."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from genrl_swarm.async_grpo.config import Stale
from genrl_swarm.async_grpo.staleness import StalenessStats, lag, weight
from genrl_swarm.core import TokenRollout


@dataclass(frozen=True)
class Group:
    """One prompt's completions with the rewards this peer computed, and where they came from.

    ``version``: the policy version that sampled it (own groups), or the learner's version when
    it arrived (a swarm peer's group, whose own version counts another policy's updates)."""

    body: TokenRollout
    rewards: tuple[float, ...]
    version: int
    source: str  # "worker-<i>", "peer" (the game's own act) or a swarm peer's id
    external: bool = False
    texts: tuple[str, ...] = ()

    @property
    def completions(self) -> int:
        return len(self.body.samples)


@dataclass(frozen=True)
class Taken:
    """A batch for one update: the groups, their staleness and their weights in the loss."""

    groups: tuple[Group, ...]
    staleness: tuple[int, ...]
    weights: tuple[float, ...]


@dataclass
class RolloutBuffer:
    """Thread-safe: the driver loop and the game's exchange (another thread) both put."""

    capacity: int
    max_staleness: int
    stale: Stale = "drop"
    downweight: float = 0.5
    stats: StalenessStats = field(default_factory=StalenessStats)
    evicted: int = 0  # groups pushed out by capacity
    _items: list[Group] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __len__(self) -> int:
        return len(self._items)

    def put(self, groups: Iterable[Group]) -> None:
        with self._lock:
            self._items.extend(groups)
            over = len(self._items) - self.capacity
            if over > 0:
                self._items.sort(key=lambda g: g.version)
                del self._items[:over]
                self.evicted += over

    def take(self, n: int, learner_version: int) -> Taken | None:
        """``n`` groups for the learner at ``learner_version``, or None while fewer are usable."""
        with self._lock:
            kept: list[tuple[Group, int, float]] = []
            for g in self._items:
                s = lag(learner_version, g.version)
                w = weight(s, self.max_staleness, self.stale, self.downweight)
                if w is None:
                    self.stats.dropped += 1
                else:
                    kept.append((g, s, w))
            self._items = [g for g, _, _ in kept]
            if len(kept) < n:
                return None
            kept.sort(key=lambda x: x[0].version)  # stable: arrival order within a version
            chosen, rest = kept[:n], kept[n:]
            self._items = [g for g, _, _ in rest]
        staleness, weights = [s for _, s, _ in chosen], [w for _, _, w in chosen]
        self.stats.record(staleness, weights)
        return Taken(tuple(g for g, _, _ in chosen), tuple(staleness), tuple(weights))
