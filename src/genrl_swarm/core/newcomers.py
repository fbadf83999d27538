"""Newcomers: ids this peer has no history with, and how many it reads a round.

In a game with per-peer questions (SAPO) a receiver rebuilds each sender's tasks from the seed
to check and score its bodies, on its own CPU: about 6 ms a sender on the default Reasoning Gym
datasets, 100-400 ms on ``sudoku``. The rebuild is charged to the sender (``core.admission``
counts it with its checks), but budgets are per id and ids are free: 30 fresh ids took an honest
round's CPU from 0.8 s to 14 s, each well inside its own budget. So senders without history are
read at most ``NEWCOMERS_PER_ROUND`` a round, first by a hash of (round, id) that every peer
computes alike (honest peers read the same ones, and an honest newcomer among any number of
Sybils gets its turn); the others are not read that round (``DropKind.FRESH``, never held
against them), which costs them a round, as lateness does.

History: the transport vouches for the sender (``ExchangeResult.vouched``: the peers of one
process, the ranks of one job; a swarm strangers cannot join), or this peer kept bodies of it in
one of the last ``MEMORY_ROUNDS`` rounds. Ids that earn history cost their budgets like any
member: what Sybils that do the work each round cost is the Sybil problem (trust model).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from genrl_swarm.core.trust import MEMORY_ROUNDS
from genrl_swarm.core.types import Drop, DropKind, tie_break

#: Senders without history read per round: a stream of fresh ids costs at most this many task
#: rebuilds a round, as it costs at most one short wait (``comm.base.FRESH_SHARE``).
NEWCOMERS_PER_ROUND = 1


@dataclass
class Newcomers:
    """Who this peer has history with, and the newcomers it admitted this round."""

    me: str
    per_round: int = NEWCOMERS_PER_ROUND
    kept: dict[str, int] = field(default_factory=dict)  # sender -> last round this peer kept a body of it
    round: int = -1
    admitted: set[str] = field(default_factory=set)  # newcomers read this round

    def known(self, peer: str, round: int) -> bool:
        return peer == self.me or round - self.kept.get(peer, -(10**9)) <= MEMORY_ROUNDS

    def turn_away(self, round: int, stage: int, senders: Iterable[str], vouched: Collection[str]) -> list[Drop]:
        """One drop per sender without history past this round's admissions (a newcomer once
        admitted stays admitted for the round's later stages)."""
        if round != self.round:
            self.round, self.admitted = round, set()
        fresh = sorted((p for p in senders if p not in vouched and not self.known(p, round)), key=lambda p: tie_break(round, p))
        for peer in fresh:
            if len(self.admitted) < self.per_round:
                self.admitted.add(peer)
        why = f"no history with this peer, over the {self.per_round} newcomer(s) it reads a round"
        return [Drop(p, stage, None, why, DropKind.FRESH) for p in fresh if p not in self.admitted]

    def close_round(self, round: int, kept: Iterable[str]) -> None:
        """``kept``: the senders whose bodies this peer kept in ``round``; older history is forgotten."""
        self.kept.update(dict.fromkeys(kept, round))
        self.kept = {p: r for p, r in self.kept.items() if round - r <= MEMORY_ROUNDS}
