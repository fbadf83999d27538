"""The simulated peers: their links, reachability, attack class and session state, and the
churn that moves them in and out of the swarm (a heapq of timed events).

Per-peer numbers live in numpy arrays indexed by peer number; the protocol core sees peers
by their ids (``p00042``), exactly as the transport does. One ``LiveView`` stands for every
peer's view (all peers read the same DHT records; the simulator does not model a stale read).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from genrl_swarm.core.trust import SenderBook, TrustConfig
from genrl_swarm.protocol import LiveView
from genrl_swarm.sim.model import ATTACKS, MIXES, SimConfig

HONEST = -1
FLOOD, FORGE, COPY, FUTURE = range(len(ATTACKS))
#: A far-future attacker announces this many rounds ahead of the swarm.
FUTURE_LEAD = 1000


@dataclass(order=True)
class Event:
    time: float
    seq: int
    kind: str = field(compare=False)  # "leave", "crash" or "join"
    peer: int = field(compare=False)


class Population:
    def __init__(self, cfg: SimConfig, rng: np.random.Generator) -> None:
        n, self.cfg, self.rng = cfg.peers, cfg, rng
        self.ids = [f"p{i:05d}" for i in range(n)]
        links = MIXES[cfg.net.mix]
        kind = rng.choice(len(links), size=n, p=np.array([link.share for link in links]) / sum(link.share for link in links))
        self.down = np.array([links[k].down_mbps for k in kind]) * 125_000.0  # bytes/s
        self.up = np.array([links[k].up_mbps for k in kind]) * 125_000.0
        self.nat = rng.random(n) < cfg.net.nat_fraction
        self.attack = np.full(n, HONEST)
        hostile = rng.choice(n, size=int(round(cfg.hostile_fraction * n)), replace=False)
        self.attack[hostile] = np.arange(len(hostile)) % len(ATTACKS)
        self.alive = np.ones(n, dtype=bool)
        self.start = np.zeros(n)  # when each peer starts its next round
        self.dies_at = np.full(n, np.inf)  # a scheduled crash
        self.joined_at = np.full(n, np.nan)  # a rejoin whose catch-up is still being timed
        self.view = LiveView(cfg.liveness_s)
        self.books = [SenderBook(TrustConfig(max_bytes=cfg.max_bytes), me=i) if self.attack[k] == HONEST else None for k, i in enumerate(self.ids)]
        self.events: list[Event] = []
        self._seq = 0
        for peer in range(n):
            self._schedule_departure(peer, 0.0)

    @property
    def honest(self) -> np.ndarray:
        honest: np.ndarray = self.attack == HONEST
        return honest

    def _push(self, time: float, kind: str, peer: int) -> None:
        self._seq += 1
        heapq.heappush(self.events, Event(time, self._seq, kind, peer))

    def _schedule_departure(self, peer: int, now: float) -> None:
        churn = self.cfg.churn
        mean = churn.mean_session_s()
        if math.isinf(mean):
            return
        scale = mean / math.gamma(1 + 1 / churn.weibull_shape)
        when = now + scale * float(self.rng.weibull(churn.weibull_shape))
        crash = self.rng.random() < churn.crash_share
        if crash:
            self.dies_at[peer] = when
        self._push(when, "crash" if crash else "leave", peer)

    def advance(self, until: float, round: int) -> int:
        """Apply churn events up to ``until``; returns how many happened."""
        done = 0
        while self.events and self.events[0].time <= until:
            event = heapq.heappop(self.events)
            done += 1
            peer, ident = event.peer, self.ids[event.peer]
            if event.kind == "join":
                self.alive[peer], self.dies_at[peer] = True, np.inf
                self.start[peer] = max(event.time, until)
                self.joined_at[peer] = event.time
                self.view.record(ident, round, event.time)
                self._schedule_departure(peer, event.time)
                continue
            self.alive[peer] = False
            if event.kind == "leave":
                self.view.record(ident, round, event.time, leaving=True)
            self._push(event.time + float(self.rng.exponential(self.cfg.churn.downtime_s)), "join", peer)
        return done

    def renew(self, now: float, round: int) -> None:
        """Every live peer's membership record, renewed (far-future attackers lie about the round)."""
        for peer in np.flatnonzero(self.alive):
            lead = FUTURE_LEAD if self.attack[peer] == FUTURE else 0
            self.view.record(self.ids[peer], round + lead, now, reachable=not self.nat[peer])
