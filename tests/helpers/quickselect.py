"""The selection the contract used to settle a round with, and the order of scores that makes it
quadratic: what voters who choose the order and values of their scores did to settlement cost.

``select`` is a port of the old ``SwarmCoordinator._select`` (Hoare partition, middle pivot).
``adversarial_order`` plays McIlroy's adversary against it ("A killer adversary for quicksort",
1999): values are decided lazily, each pivot frozen just below every undecided value, so every
partition splits off one element and reaching the median takes ~3n²/8 comparisons, not ~3n.
"""

from __future__ import annotations

from collections.abc import Callable

#: ``compare(item, pivot)``: <0, 0 or >0 as ``item`` is below, equal to or above ``pivot``.
Compare = Callable[[int, int], int]


def _plain(item: int, pivot: int) -> int:
    return (item > pivot) - (item < pivot)


def select(values: list[int], k: int, compare: Compare = _plain) -> tuple[int, int]:
    """(element ``k`` of ``values`` sorted, comparisons made); ``values`` is reordered in place."""
    count = 0

    def vs(item: int, pivot: int) -> int:
        nonlocal count
        count += 1
        return compare(item, pivot)

    lo, hi = 0, len(values) - 1
    while lo < hi:
        pivot = values[(lo + hi) // 2]
        i, j = lo, hi
        while i <= j:
            while vs(values[i], pivot) < 0:
                i += 1
            while vs(values[j], pivot) > 0:
                j -= 1
            if i <= j:
                values[i], values[j] = values[j], values[i]
                i += 1
                if j == 0:
                    break
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            break
    return values[k], count


def adversarial_order(n: int, k: int) -> list[int]:
    """The values 1..n in the order that makes ``select(values, k)`` quadratic."""
    frozen: dict[int, int] = {}  # item -> rank, decided when the item first serves as a pivot

    def compare(item: int, pivot: int) -> int:
        if pivot not in frozen:
            frozen[pivot] = len(frozen)  # below every undecided item
        a, b = frozen.get(item, n + item), frozen[pivot]
        return (a > b) - (a < b)

    select(list(range(n)), k, compare)
    for item in range(n):  # the rest: above every pivot, in any order
        frozen.setdefault(item, len(frozen))
    return [frozen[item] + 1 for item in range(n)]
