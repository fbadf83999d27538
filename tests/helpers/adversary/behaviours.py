"""What a hostile peer may do, one small value per behaviour; a ``Strategy`` composes them.

Honest peers are addressed by their index (0, 1, 2, ...) so a strategy is a value independent
of the run's ids. Every behaviour stays within what a stranger can do on a real transport: post
what it likes under its own ids, show different pullers different bytes, withhold bytes, be
slow, pass on signed records it saw, and vote on the coordinator with every account it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from helpers.flood import FloodPlan


@dataclass(frozen=True)
class Equivocate:
    """Shows ``victims`` a second, validly signed stage-0 payload (other arms) in ``rounds``."""

    victims: frozenset[int]
    rounds: frozenset[int]


@dataclass(frozen=True)
class Hide:
    """Withholds its reveals of ``stages`` from ``victims`` and serves them nothing by digest."""

    victims: frozenset[int]
    stages: frozenset[int]


@dataclass(frozen=True)
class Late:
    """In ``rounds``: commits and never reveals (``silent``), or commits only after every honest peer's commit deadline passed."""

    rounds: frozenset[int]
    silent: bool


@dataclass(frozen=True)
class FreshIds:
    """Every exchange, ``count`` new ids commit; with ``reveal`` they reveal bytes that are not a payload."""

    count: int
    reveal: bool


@dataclass(frozen=True)
class Replay:
    """Archives what it collects and, ``lag`` rounds later, passes the archived honest
    commitments on as evidence, with the honest peers' commitments of an earlier run of the same
    swarm (``old_run``: identities reused); with ``payload`` it also reveals an archived honest
    payload in place of its own."""

    lag: int
    old_run: bool
    payload: bool


@dataclass(frozen=True)
class Collude:
    """A coalition of ``size`` accounts (this peer and ``size - 1`` voters that only report):
    each reports ``honest_score`` for every honest peer and ``own_score`` for every member."""

    size: int
    honest_score: float
    own_score: float


@dataclass(frozen=True)
class Strategy:
    """One adversary's composition; None: that behaviour is not used. ``flood`` None: its
    policy is the game's own (honest pulls)."""

    flood: FloodPlan | None = None
    equivocate: Equivocate | None = None
    hide: Hide | None = None
    late: Late | None = None
    fresh: FreshIds | None = None
    replay: Replay | None = None
    collude: Collude | None = None
    seed: int = 0

    def describe(self) -> str:
        parts = [f"seed {self.seed}"]
        if self.flood is not None:
            parts.append(f"flood {self.flood.describe()}")
        for behaviour in (self.equivocate, self.hide, self.late, self.fresh, self.replay, self.collude):
            if behaviour is not None:
                shown = ", ".join(f"{f.name}={_shown(getattr(behaviour, f.name))}" for f in fields(behaviour))
                parts.append(f"{type(behaviour).__name__.lower()}({shown})")
        return "; ".join(parts)


def _shown(value: object) -> object:
    return sorted(value) if isinstance(value, frozenset) else value
