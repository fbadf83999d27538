"""Who is alive, and which round the swarm is in: membership as a pure state machine.

A member is heard of through its signed record (renewed every ``timeout / 3`` s) or through
traffic from it; it counts as alive while the newer of the two is younger than ``timeout`` and
it has not announced that it left. The transport feeds records it read from the DHT; the
simulator feeds joins, renewals, crashes and departures from its event queue. Both ask
``live(now)`` for the peers an exchange may pull from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class LiveView:
    """This peer's view of the members: last time heard of, announced round, departures."""

    timeout: float
    heard: dict[str, float] = field(default_factory=dict)
    rounds: dict[str, int] = field(default_factory=dict)
    left: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)  # announced no dialable address (behind NAT)

    def record(self, peer: str, round: int, issued: float, leaving: bool = False, reachable: bool = True) -> None:
        """A member record (already signature-checked); an older one never moves a peer back."""
        if issued < self.heard.get(peer, -math.inf):
            return
        self.heard[peer], self.rounds[peer] = issued, round
        for flag, members in ((leaving, self.left), (not reachable, self.unreachable)):
            if flag:
                members.add(peer)
            else:
                members.discard(peer)

    def sighted(self, peer: str, when: float) -> None:
        """Traffic from a known member: proof of life even when its renewals are slow to show."""
        if peer in self.heard:
            self.heard[peer] = max(self.heard[peer], when)

    def live(self, now: float) -> list[str]:
        """Members alive at ``now``, sorted (the order every strategy draws from)."""
        return sorted(p for p, t in self.heard.items() if alive(t, p in self.left, now, self.timeout))

    def servers(self, now: float) -> list[str]:
        """Live members that can be dialled: the ones a pull may ask (an unreachable member
        pulls from others but is never waited for)."""
        return [p for p in self.live(now) if p not in self.unreachable]

    def forget(self, now: float, after: float) -> None:
        """Drop members not heard of for ``after`` seconds (long gone, or strangers)."""
        for peer in [p for p, t in self.heard.items() if now - t > after]:
            del self.heard[peer]
            self.rounds.pop(peer, None)
            self.left.discard(peer)
            self.unreachable.discard(peer)

    def catch_up(self, me: str, own: int, now: float, quorum: float, max_jump: int) -> int:
        """The round to play next, given the live members' announced rounds (see ``attested_round``)."""
        others = [self.rounds[p] for p in self.live(now) if p != me]
        return attested_round(own, others, quorum, max_jump)


def alive(last_heard: float, left: bool, now: float, timeout: float) -> bool:
    """The liveness rule, for the transport's member view and the simulator's alike: a member is
    alive while it has not announced that it left and was last heard of (a record or traffic)
    at most ``timeout`` seconds ago."""
    return not left and now - last_heard <= timeout


def forget_after(timeout: float) -> float:
    """Seconds unheard after which a member is forgotten (long gone, or a stranger): far past
    the liveness timeout, so a member on a slow link is never forgotten while it still counts."""
    return max(60.0, 20 * timeout)


def attested_round(own: int, others: list[int], quorum: float, max_jump: int) -> int:
    """The round a quorum of the other live members has reached, bounded to ``own + max_jump``.

    More than ``quorum`` (a fraction) of them must announce at least that round, so one record
    (or a minority of sybils) claiming a far-future round moves nobody; a lone other peer is
    believed, but never by more than ``max_jump`` rounds per call."""
    if not others:
        return own
    k = min(len(others), math.floor(quorum * len(others)) + 1)
    attested = sorted(others, reverse=True)[k - 1]
    return max(own, min(attested, own + max_jump))
