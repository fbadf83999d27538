"""What a swarm group can teach this peer: the receiver's own valuation, which ids cannot multiply.

SAPO trains on ``num_external`` swarm groups a round. With more informative groups than room, a
draw in which senders take turns gives k ids of one adversary k turns: issue 42's hostile review
had 9 Sybil ids, each sending distinct, legal, low-value groups, crowd the honest senders' groups
out (13.9% of honest evaluation, inside every weight bound). So competing groups are ranked
(``lm/selection.py``) by what they can teach *this* peer, measured here from its own task rewards
and its own model:

- **gain**, first: the group's best reward above this peer's own mean reward for that prompt (for
  a prompt it did not answer: its mean over its own groups this round). A group holding nothing
  better than what this peer already does is worth 0; a better answer outranks a worse one however
  likely either is;
- **closeness**, between equal gains: this peer's per-token probability (geometric mean, at the
  sampling temperature) of that best completion's first ``OPENING`` tokens. Of two equally good
  answers, the one this peer would write teaches it (the path budget, ``swarm_budget``, weighs an
  unlikely path at ~0); under the path budget the opening is what a swarm completion teaches
  (SmolLM2's own 64-token samples weigh 0.37 at the 9th token and 4e-5 at the 17th), and reading
  whole completions cost a receiver 42 CPU-s a round for 28 groups of 512 tokens (SmolLM2, one
  thread), against 5.2 for their openings.

Gain comes first because a product of the two let a likely mediocre answer outrank an unlikely
better one: a hostile review's decoy completions with the base model's likeliest tails (per-token
mean ~0.5) beat honest groups holding the target (~0.2), 3 ids costing 10.6% +- 8.5% at
``num_external`` 4 (``tests/test_review_swarm_value.py``). Gains are compared to ``GAIN_DIGITS``
decimals, so rewards that differ only by rounding tie and closeness decides. To take a slot from an
honest group a sender has to send a better-scoring completion, or an equally good one this peer
finds likelier, that is, what this peer would learn from anyway; sending it from more ids only
wins exact ties.

The forward runs only where closeness can change the draw (``at_the_cut``): over the groups whose
gain is the gain of the last slot, at most ``room`` of them per sender. Groups above it are drawn
whatever their closeness and groups below it never are, so a sender's cost to the receiver is at
most ``room`` openings a round however many groups or ids it sends them from (each id is a sender;
ids are bounded by the swarm's admissions). The draw is then the one reading every group, except
that a sender with more than ``room`` groups at the cut competes with the first ``room`` it sent
(its others rank after every group that was read: which of its own groups wins can differ, not how
many slots it can win). Not covered: for a prompt this peer did not answer the gain is against its
round mean, across prompts of other difficulty.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Sequence

from genrl_swarm.core import ScoredRollout

#: Tokens of a completion its closeness is read over (see the module docstring).
OPENING = 32
#: Decimals gains are compared to (see the module docstring).
GAIN_DIGITS = 6


def at_the_cut(gain: Sequence[float], senders: Sequence[str], room: int, cap: int = 0) -> list[int]:
    """The candidates whose closeness can change a draw of ``room`` groups (``cap``: at most that
    many from one sender, 0: no cap): those with a positive gain equal to the last slot's, or to
    the last of a capped sender's own groups that could be drawn, at most ``room`` per sender (the
    first it sent). Above those gains a group is drawn and below them never, whatever its closeness."""
    if room <= 0:
        return []
    by_sender: dict[str, list[int]] = {}
    for i in sorted(range(len(gain)), key=lambda i: -gain[i]):
        by_sender.setdefault(senders[i], []).append(i)
    ranked = sorted((gain[i] for ids in by_sender.values() for i in ids[: cap or None]), reverse=True)
    cut = ranked[min(room, len(ranked)) - 1] if ranked else 0.0
    capped = {sender: gain[ids[cap - 1]] for sender, ids in by_sender.items() if 0 < cap < len(ids)}
    taken: dict[str, int] = {}
    rows = []
    for i, (g, sender) in enumerate(zip(gain, senders)):
        at_cut = g == cut and capped.get(sender, cut) <= cut  # a sender capped above the cut never reaches it
        if g > 0 and (at_cut or (g == capped.get(sender) and g >= cut)) and taken.get(sender, 0) < room:
            taken[sender] = taken.get(sender, 0) + 1
            rows.append(i)
    return rows


def prompt_of(group: ScoredRollout) -> tuple[int, str]:
    return group.rollout.stage, group.rollout.task_id


def best(group: ScoredRollout) -> int:
    """The index of the group's first highest-rewarded sample."""
    return max(range(len(group.rewards)), key=lambda i: (group.rewards[i], -i))


def gains(candidates: Sequence[ScoredRollout], own: Sequence[ScoredRollout], key: Callable[[ScoredRollout], Hashable] = prompt_of) -> list[float]:
    """Per candidate, its best reward above this peer's own mean reward for its ``key`` (its
    prompt; an agent episode's task group), or for this round where this peer has none there, to
    ``GAIN_DIGITS`` decimals; 0 for a group without a finite reward (it shows nothing better,
    whatever the rewards' sign)."""
    mine: dict[Hashable, list[float]] = {}
    for g in own:
        mine.setdefault(key(g), []).extend(finite(g.rewards))
    means = {k: statistics.fmean(rs) for k, rs in mine.items() if rs}
    everything = [r for rs in mine.values() for r in rs]
    level = statistics.fmean(everything) if everything else 0.0
    return [round(max(max(finite(g.rewards)) - means.get(key(g), level), 0.0), GAIN_DIGITS) if finite(g.rewards) else 0.0 for g in candidates]


def finite(rewards: Sequence[float]) -> list[float]:
    """The rewards that are numbers: a NaN would compare equal to every gain and break the order."""
    return [r for r in rewards if math.isfinite(r)]
