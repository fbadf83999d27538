"""Left-padded prompt batches, as the LM policy hands them to its sampler (torch is imported on
use: the helpers package must import where torch is not installed)."""

from __future__ import annotations

from typing import Any


def left_padded(rows: list[list[int]], pad: int = 0) -> tuple[Any, Any]:
    """(ids, mask) [len(rows), longest]: each row's tokens at the right, ``pad`` before them."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :], mask[i, width - len(r) :] = torch.tensor(r), 1
    return ids, mask
