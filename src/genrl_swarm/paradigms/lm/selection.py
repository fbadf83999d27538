"""SAPO's choice of what a peer trains on: its own groups, and the swarm's that can teach it.

A group whose rewards are all equal has zero advantage and trains nothing; drawing the external
share uniformly and dropping such groups afterwards (as a uniform draw does) wastes the share on
questions the swarm found all-easy or all-hard. SAPO filters first, then draws. The draw goes
round-robin over senders in a random order, so one sender gets at most its fair share
(``ceil(num_external / senders)``) while others have informative groups left: a flooder sending
many groups cannot fill the external share. ``max_per_sender`` (``grpo.max_external_per_sender``)
caps a sender's groups in one update outright, even when no other sender has groups left.
What "informative" means is the learner's: a GRPO group carries its rewards, an agent episode
teaches only through its task group (``teaches``); the draw is the same.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence

from genrl_swarm.core.types import ScoredRollout


def informative(group: ScoredRollout) -> bool:
    """Rewards that differ: the group has an advantage to learn from."""
    return max(group.rewards) - min(group.rewards) > 1e-6


def draw_external(
    swarm: Sequence[ScoredRollout], num_external: int, rng: random.Random, max_per_sender: int = 0,
    teaches: Callable[[ScoredRollout], bool] = informative,
) -> list[ScoredRollout]:  # fmt: skip
    """Up to ``num_external`` swarm groups that ``teaches`` accepts, senders taking turns in a
    random order, at most ``max_per_sender`` from one sender (0: no cap but the turns)."""
    by_sender: dict[str, list[ScoredRollout]] = defaultdict(list)
    for group in swarm:
        if teaches(group):
            by_sender[group.rollout.peer_id].append(group)
    queues = [rng.sample(groups, len(groups))[: max_per_sender or None] for _, groups in sorted(by_sender.items())]
    rng.shuffle(queues)
    chosen: list[ScoredRollout] = []
    while len(chosen) < num_external and queues:
        queues = [q for q in queues if q]
        for q in queues[: num_external - len(chosen)]:
            chosen.append(q.pop())
    return chosen


def sapo_select(
    own: Sequence[ScoredRollout],
    swarm: Sequence[ScoredRollout],
    num_local: int,
    num_external: int,
    rng: random.Random,
    max_per_sender: int = 0,
    teaches: Callable[[ScoredRollout], bool] = informative,
) -> list[ScoredRollout]:
    """``num_local`` of this peer's groups (all when negative) and ``draw_external`` of the swarm's."""
    mine = list(own) if num_local < 0 or num_local >= len(own) else rng.sample(list(own), num_local)
    return mine + draw_external(swarm, num_external, rng, max_per_sender, teaches)
