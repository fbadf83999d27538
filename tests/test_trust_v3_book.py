"""SenderBook stays bounded under a stream of fresh Sybil ids (issue 28, point 7): before, it
kept every sender it ever dropped (about 98 MB after 220,000 ids); now a sender neither dropped
nor quarantined for MEMORY_ROUNDS rounds is forgotten, while the totals by kind keep counting."""

from __future__ import annotations

from genrl_swarm.core.trust import MEMORY_ROUNDS, SenderBook, TrustConfig
from genrl_swarm.core.types import Drop

IDS_PER_ROUND, ROUNDS = 500, 200


def sybil_drops(round: int) -> list[Drop]:
    """Fresh ids each round: one refused body each, and one forged payload (hard: quarantined)."""
    fresh = [f"sybil-{round}-{i}" for i in range(IDS_PER_ROUND)]
    return [Drop(p, 0, "t", "refused", "refused") for p in fresh[1:]] + [Drop(fresh[0], 0, None, "forged", "payload")]


def test_a_stream_of_sybil_ids_leaves_the_book_bounded() -> None:
    book = SenderBook(TrustConfig(quarantine_rounds=3), me="me")
    for r in range(ROUNDS):
        book.close_round(r, sybil_drops(r))
    remembered = {p for p, _ in book.drops}
    assert len(remembered) <= (MEMORY_ROUNDS + 2) * IDS_PER_ROUND  # before: all 100,000
    assert len(book.until) <= MEMORY_ROUNDS + 2 and book.reasons.keys() == book.until.keys()
    assert book.counters() == {"trust/dropped_payload": float(ROUNDS), "trust/dropped_refused": float(ROUNDS * (IDS_PER_ROUND - 1))}


def test_a_sender_is_remembered_while_quarantined_or_recently_dropped() -> None:
    book = SenderBook(TrustConfig(quarantine_rounds=100), me="me")
    book.close_round(0, [Drop("forger", 0, None, "forged", "payload"), Drop("sloppy", 0, "t", "refused", "refused")])
    for r in range(1, MEMORY_ROUNDS + 5):
        book.close_round(r, [])
    assert "forger" in book.quarantined(MEMORY_ROUNDS + 5)  # its quarantine outlives the memory: kept
    assert book.drops[("forger", "payload")] == 1
    assert ("sloppy", "refused") not in book.drops  # dropped once, long ago: forgotten
    assert book.counters()["trust/dropped_refused"] == 1.0
