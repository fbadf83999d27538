"""Which run (epoch, ``comm.epoch``) a HiveMind peer plays: the one of the swarm it joins.

A HiveMind swarm has no master and lives as long as any of its peers do, so its epoch is fixed by
the peers that found it and learned by everyone else, from the signed membership records
(``members.MemberRecord.epoch``) it sees until its first exchange:

* the epoch the peers it joins through announce (the ids in its initial peers' multiaddrs,
  ``/p2p/<id>``, else the peers it remembers): those its operator chose for the way in;
* when none of them is in this swarm (a bootstrap peer of another, or no initial peers), the one
  most live members announce, the lowest on a tie: peers that start a swarm together each draw one
  (or bring their run directory's on ``--resume``) and settle on one before their first exchange.

A stranger can sway the second rule (announce an epoch of its choosing, even one of an earlier run)
but never makes a peer sign twice: what an identity signed is kept per epoch beside its identity
file (``HivemindBackend.bind_run``), so a peer led into an epoch it played sits out the slots it
signed there. Members of another epoch (another run of a same-named swarm on the same DHT) are not
members of this one: not waited for, not asked, and their records attest no round.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence

from genrl_swarm.comm.epoch import EPOCH_BYTES, Epoch
from genrl_swarm.comm.hivemind.members import MemberRecord


def ids_in(maddrs: Iterable[str]) -> frozenset[str]:
    """The peer ids the multiaddrs name (their ``/p2p/<id>`` part)."""
    ids: set[str] = set()
    for maddr in maddrs:
        parts = maddr.rstrip("/").split("/")
        ids.update(parts[i + 1] for i, part in enumerate(parts[:-1]) if part == "p2p")
    return frozenset(ids)


def swarm_epoch(others: Mapping[str, MemberRecord], through: Collection[str], own: Epoch) -> Epoch:
    """The epoch to play, from the live records of the other peers (``others``) and this
    peer's own (``own``): see the module's docstring."""
    announced = {p: Epoch(r.epoch) for p, r in others.items() if len(r.epoch) == EPOCH_BYTES and not r.leaving}
    named = [e for p, e in announced.items() if p in through]
    return _most(named) if named else _most([*announced.values(), own])


def _most(epochs: Sequence[Epoch]) -> Epoch:
    """The epoch named most often; the lowest of those on a tie (every peer breaks it alike)."""
    votes = Counter(epochs)
    return min(votes, key=lambda e: (-votes[e], e.value))
