"""LocalCoordinator: the in-process referee (the default).

It keeps the same books the on-chain coordinator keeps (registry, round, one report per peer
and round, cumulative rewards and wins), so a game behaves the same when it moves on chain.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Mapping

from genrl_swarm.core.interfaces import Coordinator
from genrl_swarm.core.types import RoundResult


class LocalCoordinator(Coordinator):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.peers: set[str] = set()
        self.reports: dict[tuple[int, str], RoundResult] = {}
        self.rewards: defaultdict[str, float] = defaultdict(float)
        self.wins: Counter[str] = Counter()
        self._won: set[tuple[int, str]] = set()
        self._round = 0

    def register(self, peer_id: str) -> None:
        with self._lock:
            self.peers.add(peer_id)

    def current_round(self) -> int:
        with self._lock:
            return self._round

    def report(self, result: RoundResult) -> None:
        key = (result.round, result.peer_id)
        with self._lock:
            if result.peer_id not in self.peers:
                raise ValueError(f"peer {result.peer_id} reported before registering")
            if key in self.reports:
                raise ValueError(f"peer {result.peer_id} already reported round {result.round}")
            self.reports[key] = result
            self.rewards[result.peer_id] += result.rewards.get(result.peer_id, 0.0)
            for winner in result.winners:  # every peer votes; a round counts once per winner
                if (result.round, winner) not in self._won:
                    self._won.add((result.round, winner))
                    self.wins[winner] += 1

    def finish_round(self, round: int) -> None:
        with self._lock:
            self._round = max(self._round, round + 1)

    def standings(self) -> Mapping[str, float]:
        with self._lock:
            return dict(self.rewards)

    def tally(self, peer_id: str) -> tuple[float, int]:
        with self._lock:
            return self.rewards.get(peer_id, 0.0), self.wins.get(peer_id, 0)

    def restore(self, peer_id: str, cumulative_reward: float, wins: int) -> None:
        with self._lock:
            self.rewards[peer_id] = cumulative_reward
            self.wins[peer_id] = wins
