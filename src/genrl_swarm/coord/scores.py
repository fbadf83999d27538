"""The scoring rules every coordinator follows (the contract enforces the same ones on chain).

A report is a peer's scores of the peers it played with, itself included. The voters on a peer
are the reporters that scored someone other than themselves, plus the peer itself when it
scored only itself: a report of oneself alone is a vote on oneself, never a NEUTRAL vote on the
others, so Sybils that only self-report never outvote the reporters who scored the round. A
peer's reward for the round is the median of every voter's score of it, a voter that did not
score it counting NEUTRAL; when the voters are even in number one more vote breaks the tie: the
peer's own score of itself (NEUTRAL when it gave none). So:

- an exact half of the voters cannot set a peer below the range the other half and its own
  score give it (2 honest + 2 colluders scoring the honest 0: the honest keep their value);
- an account nobody honest scored gets NEUTRAL whatever its friends say (it has no own vote to
  break a tie with unless it reports, and then it is one voter);
- anything further takes a strict majority of the voters.

What a half can still do: raise its own members to their own claims (the tie goes to the scored
peer's own word, on both sides). The round's single win goes to the highest reward.
"""

from __future__ import annotations

import math
from collections import defaultdict
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


def round_reward(scores: Collection[float], voters: int, tie_break: float = NEUTRAL) -> float:
    """The median of ``voters`` votes: ``scores`` (each by a distinct voter), NEUTRAL for each
    voter that gave none, and, when ``voters`` is even, ``tie_break`` (the scored peer's own
    score of itself, NEUTRAL if it gave none): an odd count, so one value. The value the
    contract's ``finalizeRound`` verifies (``_isMedian``); ints in, an int out (the chain's
    fixed point)."""
    if len(scores) > voters:
        raise ValueError(f"{len(scores)} scores from {voters} voters")
    votes = sorted([*scores, *[NEUTRAL] * (voters - len(scores)), *[tie_break] * (1 - voters % 2)])
    return votes[(len(votes) - 1) // 2]


def round_rewards(reports: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Every scored peer's reward from a round's reports (reporter -> its scores, itself
    included): the voters on a peer are the reporters that scored another peer, plus the peer
    when it scored only itself; the tie-break is its own score (``round_reward``)."""
    scorers = {reporter for reporter, scores in reports.items() if any(peer != reporter for peer in scores)}
    votes: defaultdict[str, list[float]] = defaultdict(list)
    for scores in reports.values():
        for peer, score in scores.items():
            votes[peer].append(score)
    rewards = {}
    for peer, got in votes.items():
        own = reports.get(peer, {}).get(peer)
        voters = len(scorers) + (own is not None and peer not in scorers)
        rewards[peer] = round_reward(got, voters, NEUTRAL if own is None else own)
    return rewards


def round_winner(round: int, medians: Mapping[str, float]) -> str | None:
    """The peer with the highest median; ties broken per round by ``tie_break``."""
    if not medians:
        return None
    return min(medians, key=lambda p: (-medians[p], tie_break(round, p)))
