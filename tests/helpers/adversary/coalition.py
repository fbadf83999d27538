"""The coordinator as the adversary sees it: its reports, and those of the voters of its
coalition, score every honest peer low and every member high."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core.interfaces import Coordinator
from genrl_swarm.core.types import RoundResult

from helpers.adversary.behaviours import Collude


class Recorder(Coordinator):
    """The swarm's coordinator, with every report kept per round (what the invariants audit)."""

    def __init__(self, inner: LocalCoordinator) -> None:
        self.inner = inner
        self.reports: dict[int, dict[str, dict[str, float]]] = {}

    def register(self, peer_id: str) -> None:
        self.inner.register(peer_id)

    def current_round(self) -> int:
        return self.inner.current_round()

    def report(self, result: RoundResult) -> None:
        self.reports.setdefault(result.round, {})[result.peer_id] = dict(result.rewards)
        self.inner.report(result)

    def finish_round(self, round: int) -> None:
        self.inner.finish_round(round)

    def leave(self, peer_id: str) -> None:
        self.inner.leave(peer_id)

    def standings(self) -> Mapping[str, float]:
        return self.inner.standings()

    def tally(self, peer_id: str) -> tuple[float, int]:
        return self.inner.tally(peer_id)

    def restore(self, peer_id: str, cumulative_reward: float, wins: int) -> None:
        self.inner.restore(peer_id, cumulative_reward, wins)


class Colluding(Recorder):
    """The adversary's handle on ``books``: it registers ``collude.size - 1`` voters beside the
    adversary, and each report of the adversary becomes one forged report per member."""

    def __init__(self, books: Recorder, collude: Collude, me: str, honest: Sequence[str]) -> None:
        super().__init__(books.inner)
        self.reports = books.reports  # one record of the round's reports
        self.books, self.collude, self.honest = books, collude, list(honest)
        self.members = [me, *(f"{me}-voter-{i}" for i in range(collude.size - 1))]

    def register(self, peer_id: str) -> None:
        for member in self.members:
            self.books.register(member)

    def report(self, result: RoundResult) -> None:
        forged = dict.fromkeys(self.honest, self.collude.honest_score) | dict.fromkeys(self.members, self.collude.own_score)
        for member in self.members:
            self.books.report(RoundResult(result.round, member, forged, ()))

    def leave(self, peer_id: str) -> None:
        for member in self.members:
            self.books.leave(member)
