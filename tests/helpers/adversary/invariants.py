"""What must hold after every round of a run with an adversary (issue 42.5):

- no honest peer is dropped-and-counted (a drop that is provable or counts toward quarantine:
  ``DropKind.hard`` or ``counted``) or quarantined by another honest peer;
- every round settles (the coordinator froze the round before);
- no coalition of at most half of a peer's voters sets an honest peer's reward below the lowest
  score the honest reporters gave it;
- no exception escapes an honest peer;
- with one adversary of four, the honest final eval is at most 10% below the honest peers'
  alone (checked once, at the end).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from genrl_swarm.coord.scores import NEUTRAL
from genrl_swarm.core.types import Drop

#: The most the honest final eval may lose to one adversary of four.
MAX_EVAL_LOSS = 0.10


@dataclass(frozen=True)
class Violation:
    round: int
    peer: str
    what: str

    def __str__(self) -> str:
        return f"r{self.round} {self.peer}: {self.what}"


def counted_drops(round: int, me: str, drops: Iterable[Drop], honest: set[str]) -> list[Violation]:
    """Drops of honest peers by ``me`` that are held against them."""
    return [
        Violation(round, me, f"dropped honest {d.peer_id} ({d.kind}, s{d.stage}): {d.reason[:120]}")
        for d in drops
        if d.peer_id in honest and d.peer_id != me and (d.kind.hard or d.kind.counted)
    ]


def quarantines(round: int, me: str, quarantined: Iterable[str], honest: set[str], reasons: Mapping[str, str]) -> list[Violation]:
    return [Violation(round, me, f"quarantined honest {p}: {reasons.get(p, '?')}") for p in sorted(set(quarantined) & honest)]


def settled(round: int, me: str, is_settled: bool) -> list[Violation]:
    return [] if is_settled else [Violation(round, me, f"round {round} is not settled after round {round + 1}")]


def honest_rewards(round: int, reports: Mapping[str, Mapping[str, float]], rewards: Mapping[str, float], honest: set[str]) -> list[Violation]:
    """Each honest peer's reward (``rewards``, the coordinator's rule applied to ``reports``)
    against the honest voters' votes on it (their scores, NEUTRAL where one did not score it),
    when the other voters are at most half: it may not fall below the lowest (a strict
    majority may do anything: not checked)."""
    out = []
    for peer in sorted(honest & rewards.keys()):
        voters = [r for r, scores in reports.items() if any(p != r for p in scores) or peer in scores]
        votes = [reports[r].get(peer, NEUTRAL) for r in voters if r in honest]
        hostile = len(voters) - len(votes)
        if votes and 2 * hostile <= len(voters) and rewards[peer] < min(votes):
            out.append(
                Violation(
                    round, peer, f"reward {rewards[peer]:.3f} below the honest votes {sorted(votes)} ({hostile} of {len(voters)} voters hostile)"
                )
            )
    return out


def eval_loss(honest: Sequence[float], alone: Sequence[float]) -> list[Violation]:
    mine, theirs = sum(honest) / len(honest), sum(alone) / len(alone)
    loss = 1 - mine / theirs if theirs > 0 else 0.0
    return [] if loss <= MAX_EVAL_LOSS else [Violation(-1, "honest", f"final eval {mine:.3f} vs {theirs:.3f} alone: {loss:.1%} lost")]
