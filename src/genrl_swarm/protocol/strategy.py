"""Which peers to pull from: the exchange strategy, a pure function of the live view.

A ``Plan`` lists the candidates in the order they are asked and how many commitments to wait
for before revealing. Every draw is seeded by (swarm, peer, round, stage), so a peer's choice
can be recomputed by anyone with the same view: the simulator and the real transport pick the
same peers, and a test can say in advance who receives what.

* ``all``: every live member (today's behaviour): N - 1 payloads in and out per peer and stage.
* ``pull_k``: k live members drawn at random; wait for all k.
* ``pull_spare``: k + spares drawn, known offenders (quarantined once, or late recently: this
  peer's own books) only when the others run out; the reveal starts as soon as k + extra have
  committed, so a dead, unreachable or silent candidate costs nothing, and ``extra`` payloads
  absorb forgers caught at the reveal. Uniform within each stratum, so nobody is herded onto.
* ``gossip``: push to ``fanout`` random members per hop, relays forward for ``ttl`` hops
  (simulated only: the real transport serves a peer's own payload, never relays).
"""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any

from genrl_swarm.core.trust import LATE_WINDOW, SenderBook


@dataclass(frozen=True)
class Plan:
    """Ask ``candidates`` (in order) for commitments; reveal once ``needed`` have committed."""

    candidates: tuple[str, ...]
    needed: int


def rng_for(swarm: str, me: str, round: int, stage: int) -> random.Random:
    """The draw of one peer in one (round, stage): the same on every machine and in the simulator."""
    digest = hashlib.blake2b(f"{swarm}\x00{me}\x00{round}\x00{stage}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def offenders(book: SenderBook, round: int) -> frozenset[str]:
    """Senders this peer's books hold against: quarantined within its memory (``MEMORY_ROUNDS``), or late in the last rounds."""
    recent = range(round - LATE_WINDOW, round + 1)
    late = {p for p, rounds in book.late.items() if any(r in recent for r in rounds)}
    return frozenset(book.until) | late


def draw(rng: random.Random, live: Sequence[str], n: int, skip: Collection[str], low: Collection[str]) -> list[str]:
    """``n`` distinct members of ``live`` not in ``skip``, uniform; members of ``low`` only when
    the rest run out. Rejection sampling (O(n) for a large swarm), a full shuffle when small."""
    if n <= 0:
        return []
    if len(live) <= 4 * n + 16:
        order = list(live)
        rng.shuffle(order)
    else:
        order, seen, usable = [], set(), 0
        for _ in range(8 * n + 32):  # bounded; a swarm this large rarely needs more than n draws
            peer = live[rng.randrange(len(live))]
            if peer in seen:
                continue
            seen.add(peer)
            order.append(peer)
            usable += peer not in skip and peer not in low
            if usable >= n:
                break
    good = [p for p in order if p not in skip and p not in low]
    poor = [p for p in order if p not in skip and p in low]
    return (good + poor)[:n]


class Strategy(ABC):
    name: str = ""

    @abstractmethod
    def plan(self, swarm: str, me: str, round: int, stage: int, live: Sequence[str], skip: Collection[str], low: Collection[str] = ()) -> Plan:
        """The plan for ``me`` given the sorted live members, the senders not to read at all
        (``skip``: quarantined) and those to ask last (``low``: offenders)."""

    @property
    def want(self) -> int | None:
        """Payloads a peer wants per stage (SAPO's num_external); None: every live member's."""
        return None


@dataclass(frozen=True)
class AllToAll(Strategy):
    name = "all"

    def plan(self, swarm: str, me: str, round: int, stage: int, live: Sequence[str], skip: Collection[str], low: Collection[str] = ()) -> Plan:
        others = tuple(p for p in live if p != me and p not in skip)
        return Plan(others, len(others))


@dataclass(frozen=True)
class PullK(Strategy):
    k: int = 8
    name = "pull_k"

    def plan(self, swarm: str, me: str, round: int, stage: int, live: Sequence[str], skip: Collection[str], low: Collection[str] = ()) -> Plan:
        chosen = draw(rng_for(swarm, me, round, stage), live, self.k, {*skip, me}, ())
        return Plan(tuple(chosen), len(chosen))

    @property
    def want(self) -> int | None:
        return self.k


@dataclass(frozen=True)
class PullSpare(Strategy):
    k: int = 8
    spares: int = 4
    extra: int = 2
    name = "pull_spare"

    def plan(self, swarm: str, me: str, round: int, stage: int, live: Sequence[str], skip: Collection[str], low: Collection[str] = ()) -> Plan:
        chosen = draw(rng_for(swarm, me, round, stage), live, self.k + self.spares, {*skip, me}, low)
        return Plan(tuple(chosen), min(len(chosen), self.k + self.extra))

    @property
    def want(self) -> int | None:
        return self.k


@dataclass(frozen=True)
class Gossip(Strategy):
    k: int = 8
    fanout: int = 3
    ttl: int = 3
    name = "gossip"

    def plan(self, swarm: str, me: str, round: int, stage: int, live: Sequence[str], skip: Collection[str], low: Collection[str] = ()) -> Plan:
        """Push targets of one hop (``stage`` carries the hop in the simulator)."""
        chosen = draw(rng_for(swarm, me, round, stage), live, self.fanout, {*skip, me}, low)
        return Plan(tuple(chosen), 0)

    @property
    def want(self) -> int | None:
        return self.k


STRATEGIES: dict[str, type[Strategy]] = {"all": AllToAll, "pull_k": PullK, "pull_spare": PullSpare, "gossip": Gossip}


def make_strategy(name: str, **params: Any) -> Strategy:
    """A strategy by name with its parameters (unknown ones are an error naming the choices)."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown exchange strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    cls = STRATEGIES[name]
    fields = {f.name for f in dataclass_fields(cls)}  # type: ignore[arg-type]  # every strategy is a dataclass
    unknown = set(params) - fields
    if unknown:
        raise ValueError(f"strategy {name!r} takes {', '.join(sorted(fields)) or 'no parameters'}, not {', '.join(sorted(unknown))}")
    strategy = cls(**params)
    for field_name in fields:
        if getattr(strategy, field_name) < 0 or (field_name in ("k", "fanout") and getattr(strategy, field_name) < 1):
            raise ValueError(f"strategy {name!r}: {field_name} must be >= {1 if field_name in ('k', 'fanout') else 0}")
    return strategy
