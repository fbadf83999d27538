"""The console table: libp2p ids (52 characters) are shown short, and still tell peers apart."""

from __future__ import annotations

import io

from genrl_swarm.core.types import RoundResult
from genrl_swarm.run.console import ConsoleTable, short_ids

A = "12D3KooWGhVvCsq5hLbdd3i2dpDCKFyu1AkfrmKgNCnhTqDaaaaa"
B = "12D3KooWGhVvCsq5hLbdd3i2dpDCKFyu1AkfrmKgNCnhTqDbbaaa"  # differs from A only near the end


def test_long_ids_are_cut_to_their_ends_and_stay_distinct() -> None:
    labels = short_ids([A, B])
    assert labels[A] != labels[B] and all(len(v) < 20 for v in labels.values())
    assert labels[A].startswith("12D3Ko…") and A.endswith(labels[A].split("…")[1])
    assert short_ids(["peer-0", "peer-1"]) == {"peer-0": "peer-0", "peer-1": "peer-1"}  # short ids as they are


def test_the_table_prints_short_ids_for_columns_and_the_winner() -> None:
    out = io.StringIO()
    table = ConsoleTable([A, B], max_rounds=2, stream=out)
    for peer in (A, B):
        table(None, RoundResult(round=0, peer_id=peer, rewards={A: 0.5, B: 0.25}, winners=(B,)))  # type: ignore[arg-type]
    text = out.getvalue()
    assert A not in text and B not in text
    labels = short_ids([A, B])
    assert labels[A] in text.splitlines()[0] and labels[B] in text.splitlines()[0]
    assert labels[B] in text.splitlines()[1]  # the winner, as its column reads
