"""The scoring rules every coordinator follows (the contract enforces the same ones on chain).

The voters of a round are the peers that reported it. A peer's reward for the round is the
median of every voter's score of it (its own included: it is one voter among many), a voter that
did not score it counting NEUTRAL, plus one NEUTRAL tie-breaking vote when the voters are even in
number. Moving a reward past NEUTRAL thus takes a strict majority of the round's voters: an
account nobody honest scored gets NEUTRAL whatever its friends say, and one hostile peer of three
cannot push an honest peer out of the range the honest voters gave it. The round's single win
goes to the highest reward.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

from genrl_swarm.core.types import tie_break

#: |reward| bound of a score (on chain: MAX_SCORE = MAX_REWARD * REWARD_SCALE).
MAX_REWARD = 1e6
#: Fixed-point scale of rewards on chain.
REWARD_SCALE = 1_000_000
#: What a voter's missing score counts as (and the tie-breaking vote); the contract's NEUTRAL.
NEUTRAL = 0.0


def check_reward(peer: str, value: object) -> float:
    """``value`` as a float when it is a finite number with |value| <= MAX_REWARD; else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"reward for {peer} is not a number: {value!r}")
    x = float(value)
    if not math.isfinite(x) or abs(x) > MAX_REWARD:
        raise ValueError(f"reward for {peer} must be finite with |reward| <= {MAX_REWARD:g}, got {x!r}")
    return x


def round_reward(scores: Collection[float], voters: int) -> float:
    """The median of ``voters`` votes: ``scores`` (each by a distinct voter), NEUTRAL for each
    voter that gave none, and one more NEUTRAL when ``voters`` is even (an odd count, so either
    side needs a strict majority); the contract's ``_reward``."""
    if len(scores) > voters:
        raise ValueError(f"{len(scores)} scores from {voters} voters")
    votes = sorted([*scores, *[NEUTRAL] * (voters - len(scores) + (1 - voters % 2))])
    return votes[(len(votes) - 1) // 2]


def round_winner(round: int, medians: Mapping[str, float]) -> str | None:
    """The peer with the highest median; ties broken per round by ``tie_break``."""
    if not medians:
        return None
    return min(medians, key=lambda p: (-medians[p], tie_break(round, p)))
