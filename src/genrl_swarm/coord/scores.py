"""The scoring rules every coordinator follows (the contract enforces the same ones on chain).

A peer's reward for a round is what the OTHER peers say it earned: the lower median of their
scores, so its own claim never counts and one outlier cannot move it. The round's single win
goes to the highest median.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from genrl_swarm.core.types import tie_break

#: |reward| bound of a score (on chain: MAX_SCORE = MAX_REWARD * REWARD_SCALE).
MAX_REWARD = 1e6
#: Fixed-point scale of rewards on chain.
REWARD_SCALE = 1_000_000


def check_reward(peer: str, value: object) -> float:
    """``value`` as a float when it is a finite number with |value| <= MAX_REWARD; else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"reward for {peer} is not a number: {value!r}")
    x = float(value)
    if not math.isfinite(x) or abs(x) > MAX_REWARD:
        raise ValueError(f"reward for {peer} must be finite with |reward| <= {MAX_REWARD:g}, got {x!r}")
    return x


def lower_median(values: Iterable[float]) -> float:
    """Element (n - 1) // 2 of the sorted values: raising it takes a strict majority of the
    scorers (a lone friend in a 3-peer swarm cannot), the same rule as the contract's."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of no scores")
    return ordered[(len(ordered) - 1) // 2]


def round_winner(round: int, medians: Mapping[str, float]) -> str | None:
    """The peer with the highest median; ties broken per round by ``tie_break``."""
    if not medians:
        return None
    return min(medians, key=lambda p: (-medians[p], tie_break(round, p)))
