"""LocalCoordinator: the in-process referee (the default).

It keeps the books by the rules the contract enforces on chain (coord/scores.py,
``round_rewards``): a report is the reporter's scores of the registered peers it played with,
itself included (an empty report is no vote); the voters on a peer are the reporters that scored
another peer, plus the peer itself when it scored only itself; a peer's reward is the median of
their scores of it, a missing score counting NEUTRAL and an even vote's tie broken by the peer's
own score; the round's one win goes to the highest reward. Reports are accepted for the current
and the previous round; older rounds are settled (frozen) and never change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Mapping

from genrl_swarm.coord.scores import check_reward, round_rewards, round_winner
from genrl_swarm.core.interfaces import Coordinator
from genrl_swarm.core.types import RoundResult

log = logging.getLogger(__name__)


class LocalCoordinator(Coordinator):
    """``settle_wait``: how long ``finish_round`` waits for the round's other reporters (the
    peers that reported the round before), so the books a peer logs and checkpoints right
    after its round are complete; a peer that left costs at most one such wait."""

    def __init__(self, settle_wait: float = 30.0) -> None:
        if not 0 <= settle_wait < 1e7:
            raise ValueError(f"settle_wait must be >= 0 and finite, got {settle_wait!r}")
        self.settle_wait = settle_wait
        self._cond = threading.Condition()
        self.peers: set[str] = set()
        self._left: set[str] = set()  # peers that stopped playing: nobody waits for their reports
        self._round = 0
        # Open rounds: round -> reporter -> its scores of registered peers (non-empty); round -> reporters.
        self._reports: defaultdict[int, dict[str, dict[str, float]]] = defaultdict(dict)
        self._reporters: defaultdict[int, set[str]] = defaultdict(set)
        # Settled books (restored checkpoints plus frozen rounds, added in round order).
        self._rewards: defaultdict[str, float] = defaultdict(float)
        self._wins: Counter[str] = Counter()

    def register(self, peer_id: str) -> None:
        with self._cond:
            self.peers.add(peer_id)
            self._left.discard(peer_id)

    def leave(self, peer_id: str) -> None:
        with self._cond:
            self._left.add(peer_id)
            self._cond.notify_all()

    def current_round(self) -> int:
        with self._cond:
            return self._round

    def report(self, result: RoundResult) -> None:
        """Store the reporter's scores (``result.rewards``: peer -> mean reward it computed).
        Raises ValueError for an unregistered reporter, a second report of a round, or a score
        that is not finite or beyond MAX_REWARD; a report for a settled round is ignored."""
        scores = {peer: check_reward(peer, value) for peer, value in result.rewards.items()}
        r, reporter = result.round, result.peer_id
        with self._cond:
            if reporter not in self.peers:
                raise ValueError(f"peer {reporter} reported before registering")
            if r + 1 < self._round:
                log.warning("%s reported round %d, settled already (the swarm is at %d): ignored", reporter, r, self._round)
                return
            if reporter in self._reporters[r]:
                raise ValueError(f"peer {reporter} already reported round {r}")
            self._reporters[r].add(reporter)
            known = {peer: score for peer, score in scores.items() if peer in self.peers}
            if known:
                self._reports[r][reporter] = known
            else:
                log.info("%s reported no score of a registered peer for round %d: not a vote", reporter, r)
            self._cond.notify_all()

    def finish_round(self, round: int) -> None:
        """Advance the round, settle rounds no report can change any more, then wait (up to
        ``settle_wait``) until the peers that reported the round before reported ``round`` too.
        A peer finishing a round the swarm has settled already (it fell behind) has nothing to
        wait for, and its call must not reopen the round's books."""
        with self._cond:
            expected = set(self._reporters.get(round - 1) or self.peers)
            self._round = max(self._round, round + 1)
            for settled in sorted(r for r in self._reporters if r + 1 < self._round):
                self._freeze(settled)
            if round + 1 < self._round:
                log.info("round %d was settled already (the swarm is at round %d): nothing to wait for", round, self._round)
                return
            deadline = time.monotonic() + self.settle_wait
            while not expected - self._left <= self._reporters.get(round, set()):
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(expected - self._left - self._reporters.get(round, set()))
                    log.info("round %d settles without a report from %s (waited %.0fs)", round, ", ".join(missing), self.settle_wait)
                    break
                self._cond.wait(left)

    def _medians(self, r: int) -> dict[str, float]:
        """Each scored peer's reward for round ``r``: the median of all the round's votes on it."""
        return round_rewards(self._reports.get(r, {}))

    def _freeze(self, r: int) -> None:
        medians = self._medians(r)
        for peer, median in sorted(medians.items()):
            self._rewards[peer] += median
        winner = round_winner(r, medians)
        if winner is not None:
            self._wins[winner] += 1
        self._reports.pop(r, None)
        self._reporters.pop(r, None)

    def _books(self) -> tuple[dict[str, float], Counter[str]]:
        """Settled books plus the open rounds, in round order (the same sums a resumed run makes)."""
        rewards, wins = dict.fromkeys(self.peers, 0.0) | dict(self._rewards), Counter(self._wins)
        for r in sorted(self._reporters):
            medians = self._medians(r)
            for peer, median in medians.items():
                rewards[peer] = rewards.get(peer, 0.0) + median
            winner = round_winner(r, medians)
            if winner is not None:
                wins[winner] += 1
        return rewards, wins

    def settled(self, round: int) -> bool:
        """Whether ``round`` is frozen: past its grace round, no report can change it any more
        (what an audit waits for before it reads the books)."""
        with self._cond:
            return round + 1 < self._round and round not in self._reporters

    def standings(self) -> Mapping[str, float]:
        with self._cond:
            return self._books()[0]

    def tally(self, peer_id: str) -> tuple[float, int]:
        with self._cond:
            rewards, wins = self._books()
            return rewards.get(peer_id, 0.0), wins.get(peer_id, 0)

    def restore(self, peer_id: str, cumulative_reward: float, wins: int) -> None:
        with self._cond:
            self._rewards[peer_id] = cumulative_reward
            self._wins[peer_id] = wins
