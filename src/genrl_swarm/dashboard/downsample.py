"""Curves on one shared x axis, cut to a bounded number of points.

A chart of 100 peers over thousands of rounds would send and draw millions of points; the page
is a few hundred pixels wide. Rounds are grouped into at most ``max_points`` consecutive
buckets, the same buckets for every peer (so the series stay aligned, as uPlot wants), and each
bucket shows the mean of the values in it (None where a peer has none, e.g. between evaluations).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def buckets(xs: Sequence[int], max_points: int) -> list[list[int]]:
    """Sorted x values grouped into at most ``max_points`` consecutive runs of equal length."""
    if max_points < 1:
        raise ValueError(f"max_points must be >= 1, got {max_points}")
    size = max(1, math.ceil(len(xs) / max_points))
    return [list(xs[i : i + size]) for i in range(0, len(xs), size)]


def series(values: Mapping[int, float], groups: Sequence[Sequence[int]], digits: int = 5) -> list[float | None]:
    """Mean of ``values`` (x -> y) over each bucket, rounded (the page needs no more digits)."""
    out: list[float | None] = []
    for group in groups:
        found = [values[x] for x in group if x in values and math.isfinite(values[x])]
        out.append(round(sum(found) / len(found), digits) if found else None)
    return out
