"""A round's rewards on chain: computed here, verified by the contract.

``finalizeRound`` takes each page peer's median from the caller and checks it in one pass over
the peer's scores (counting the votes below and equal to it), so settling costs the same
whatever order the voters' scores came in; selecting the median on chain cost ~150x more in an
adversarial order. The median is ``round_reward`` (coord/scores.py) of what the contract's
``votes`` returns, so the rule lives in one place and the contract only checks it.
"""

from __future__ import annotations

from typing import Any, Protocol

from genrl_swarm.coord.scores import round_reward


class Caller(Protocol):
    """A chain reader (``ChainClient``): runs a contract function as a call."""

    def call(self, fn: Any) -> Any: ...


def chain_median(client: Caller, contract: Any, round: int, account: str) -> int:
    """``account``'s reward for ``round`` in the contract's fixed point: the median of its votes."""
    scores, voters, tie_break = client.call(contract.functions.votes(round, account))
    return int(round_reward([int(s) for s in scores], int(voters), int(tie_break)))


def next_page(client: Caller, contract: Any, round: int, size: int) -> tuple[int, list[int]]:
    """The arguments of the next ``finalizeRound`` page of at most ``size`` peers: (from, medians)."""
    start, _ = client.call(contract.functions.roundPage(round))
    peers = client.call(contract.functions.scoredPeers(round, start, size))
    return int(start), [chain_median(client, contract, round, peer) for peer in peers]
