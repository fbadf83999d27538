"""Bounded staleness: how many learner versions a group lags, and what that costs it.

A group sampled at policy version v and trained at learner version V is ``V - v`` versions
stale. Within ``max_staleness`` it trains at full weight (the off-policy correction of the GRPO
loss handles the small lag); beyond it, it is dropped, or kept at a weight that halves (by
default) with every extra version, so a slow worker's work is not thrown away entirely."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from genrl_swarm.paradigms.lm.async_grpo.config import Stale


def lag(learner_version: int, group_version: int) -> int:
    """Versions between the policy that sampled a group and the learner about to train on it."""
    return max(0, learner_version - group_version)


def weight(staleness: int, max_staleness: int, stale: Stale, downweight: float) -> float | None:
    """The group's weight in the loss, or None when it must be dropped."""
    if staleness <= max_staleness:
        return 1.0
    if stale == "drop":
        return None
    return float(downweight ** (staleness - max_staleness))


@dataclass
class StalenessStats:
    """The staleness of every group trained on, and of every group dropped for it: metrics."""

    trained: Counter[int] = field(default_factory=Counter)
    dropped: int = 0
    downweighted: int = 0

    def record(self, staleness: list[int], weights: list[float]) -> None:
        self.trained.update(staleness)
        self.downweighted += sum(1 for w in weights if w < 1.0)

    def metrics(self) -> dict[str, float]:
        total = sum(self.trained.values())
        out = {f"async/staleness_{k}": float(v) for k, v in sorted(self.trained.items())}
        mean = sum(k * v for k, v in self.trained.items()) / total if total else 0.0
        return out | {
            "async/staleness_mean": mean,
            "async/staleness_max": float(max(self.trained, default=0)),
            "async/stale_dropped": float(self.dropped),
            "async/stale_downweighted": float(self.downweighted),
        }

    def as_dict(self) -> dict[str, object]:
        return {"trained": {str(k): v for k, v in self.trained.items()}, "dropped": self.dropped, "downweighted": self.downweighted}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> StalenessStats:
        trained = data.get("trained", {})
        assert isinstance(trained, dict)
        return cls(Counter({int(k): int(v) for k, v in trained.items()}), int(str(data.get("dropped", 0))), int(str(data.get("downweighted", 0))))
