"""SAPO's choice of what a peer trains on: its own groups, and the swarm's that can teach it.

A group whose rewards are all equal has zero advantage and trains nothing; drawing the external
share uniformly and dropping such groups afterwards (as a uniform draw does) wastes the share on
questions the swarm found all-easy or all-hard. SAPO filters first, then draws.

When more groups teach than ``num_external`` has room for, they are ranked by ``value``: the
receiver's own valuation (``lm/swarm_value.py``), which a sender moves only by what it sends, never
by how many ids it sends it from. Senders take turns in a random order only among groups of equal
value (and for every group when no ``value`` is given): a flooder's many groups of one value get
at most a fair share (``ceil(num_external / senders)``) of that value's room. A fair share per
sender *id* alone is not enough: k ids of one adversary take k shares (issue 42's hostile review:
9 ids took 13.9% of honest evaluation through the turns alone). ``max_per_sender``
(``grpo.max_external_per_sender``) caps a sender's groups in one update outright, keeping its most
valuable. What "informative" means is the learner's: a GRPO group carries its rewards, an agent
episode teaches only through its task group (``teaches``); the draw is the same.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence

from genrl_swarm.core.types import ScoredRollout

#: The receiver's value of each candidate group, compared in order (higher first), computed only
#: when the groups compete.
Value = Callable[[Sequence[ScoredRollout]], Sequence[tuple[float, ...]]]


def informative(group: ScoredRollout) -> bool:
    """Rewards that differ: the group has an advantage to learn from."""
    return max(group.rewards) - min(group.rewards) > 1e-6


def draw_external(
    swarm: Sequence[ScoredRollout], num_external: int, rng: random.Random, max_per_sender: int = 0,
    teaches: Callable[[ScoredRollout], bool] = informative, value: Value | None = None,
) -> list[ScoredRollout]:  # fmt: skip
    """Up to ``num_external`` swarm groups that ``teaches`` accepts, the most valuable first,
    senders taking turns in a random order among equal values, at most ``max_per_sender`` from
    one sender (0: no cap but the turns)."""
    if num_external <= 0:  # nothing to draw: no group is valued (the valuation runs a forward)
        return []
    candidates = [g for g in swarm if teaches(g)]
    by_sender: dict[str, list[int]] = defaultdict(list)
    for i, group in enumerate(candidates):
        by_sender[group.rollout.peer_id].append(i)
    crowded = len(candidates) > num_external or 0 < max_per_sender < max(map(len, by_sender.values()), default=0)
    values = list(value(candidates)) if value is not None and crowded else [(0.0,)] * len(candidates)
    order = [tuple(-v for v in values[i]) for i in range(len(candidates))]
    ties = {i: rng.random() for i in range(len(candidates))}
    queues = [sorted(ids, key=lambda i: (order[i], ties[i]))[: max_per_sender or None] for _, ids in sorted(by_sender.items())]
    rng.shuffle(queues)
    turns = [q[k] for k in range(max(map(len, queues), default=0)) for q in queues if k < len(q)]
    return [candidates[i] for i in sorted(turns, key=lambda i: order[i])[:num_external]]  # stable: turns break ties


def sapo_select(
    own: Sequence[ScoredRollout],
    swarm: Sequence[ScoredRollout],
    num_local: int,
    num_external: int,
    rng: random.Random,
    max_per_sender: int = 0,
    teaches: Callable[[ScoredRollout], bool] = informative,
    value: Value | None = None,
) -> list[ScoredRollout]:
    """``num_local`` of this peer's groups (all when negative) and ``draw_external`` of the swarm's."""
    mine = list(own) if num_local < 0 or num_local >= len(own) else rng.sample(list(own), num_local)
    return mine + draw_external(swarm, num_external, rng, max_per_sender, teaches, value)
