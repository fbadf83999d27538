"""``KVBuffer.compact``: a finished row leaves the static sampler's batch by handing its place to
a still-active row from the back, so only the finished rows' keys and values move. Checked on a
buffer whose every row is tagged with its index: the kept rows are exactly the active ones, in
the order ``order`` reports, rows already in place are never touched, and compaction repeats on
its own result. End to end (rows finishing at different steps, each against a fresh forward of
its own prompt): tests/test_reference_lm.py."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
import torch

from genrl_swarm.paradigms.lm.decoder import KVBuffer


def tagged(rows: int, width: int = 5) -> KVBuffer:
    """[layers 2, k/v, rows, kv heads 3, width, head dim 4], every entry of row r equal to r."""
    data = torch.arange(rows, dtype=torch.float32)[None, None, :, None, None, None].expand(2, 2, rows, 3, width, 4).contiguous()
    valid = torch.zeros(rows, width, dtype=torch.bool)
    for r in range(rows):
        valid[r, : 1 + r % width] = True  # a row-dependent mask, to see it move along
    return KVBuffer(data, valid)


def rows_of(buffer: KVBuffer) -> list[int]:
    tags = buffer.data[0, 0, :, 0, 0, 0]
    assert bool((buffer.data == tags[None, None, :, None, None, None]).all())  # no row mixed with another
    return [int(t) for t in tags]


@pytest.mark.parametrize("finished", [[], [0], [7], [0, 1, 2], [1, 4, 6], list(range(1, 8)), [0, 2, 4, 6]])
def test_compact_keeps_the_active_rows_and_moves_only_into_holes(finished: list[int]) -> None:
    buffer = tagged(8)
    active = torch.ones(8, dtype=torch.bool)
    active[finished] = False
    before = buffer.valid.clone()
    out, order = buffer.compact(active)
    kept = rows_of(out)
    assert kept == order.tolist()
    assert sorted(kept) == [r for r in range(8) if r not in finished]
    assert all(kept[i] == i for i in range(len(kept)) if i not in finished)  # active rows in place stay
    assert torch.equal(out.valid, before[order])
    assert out.data.data_ptr() == buffer.data.data_ptr()  # a view of the same storage, not a copy
    assert out.data[0, 0].is_contiguous()  # each layer's keys stay one block for the batched matmuls


def test_compaction_repeats_on_its_own_result() -> None:
    buffer, origin = tagged(8), torch.arange(8)
    for finished in ([2, 5], [0], [1, 2, 3]):  # positions in the current (compacted) batch
        active = torch.ones(len(origin), dtype=torch.bool)
        active[finished] = False
        gone = set(origin[finished].tolist())
        buffer, order = buffer.compact(active)
        origin = origin[order]
        assert rows_of(buffer) == origin.tolist() and not gone & set(origin.tolist())
    assert len(origin) == 2
