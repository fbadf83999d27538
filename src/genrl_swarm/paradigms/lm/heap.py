"""glibc's malloc told to keep freed memory, so a decode step reuses its pages (CPU only).

Why: each decode step of the sampler allocates tens of MB of short-lived tensors (the logits of
64 rows of SmolLM2 alone are 64 x 49,152 x 4 B = 12.6 MB, the draw's weights as much again).
glibc serves a block over its mmap threshold (128 KB, adapting up to 32 MB) with a fresh
``mmap`` and unmaps it on ``free``, and gives the heap's top back once more than twice that is
free; either way a later step faults in new zeroed pages (~3,000 for 12.6 MB). Here the mmap
threshold is fixed at its maximum, 32 MB, and up to ``KEEP`` (256 MB) of free memory stays at the
heap's top: blocks under 32 MB come from the heap and later steps get the same pages back;
bigger ones (a 256-row step's 50 MB logits, model weights, KV buffers) are still mapped and
returned to the system on free, so a freed giant never stays resident.

Why not mmap off altogether (which also kept 50 MB blocks): a review measured its cost. Small
long-lived tensors between freed big blocks pinned them, and a decode loop over varying shapes
grew 1,125 MB against 488 MB by default after 80 calls (a synthetic loop: 22 GB); here the same
loop grew by 261 MB against 245 MB (26 calls). Measured on a 2-core AMX Xeon (2026-11-26, load
1-2): drawing a token for 64 rows from bf16 logits 5.7-14.8 ms by default (glibc's adaptive
threshold decides, run to run), 2.9-3.0 ms kept; from fp32 logits 2.2 ms either way. A whole
decode step plus draw (4 alternating pairs of processes) is inside this machine's noise
(0.89-1.21x). Cost: up to ``KEEP`` of freed memory stays
resident.

One heap for a process that hosts several peers (``ARENAS``, ``one_heap``): glibc gives threads
that allocate at once heaps of their own, and each keeps what it freed. In-process peers are
threads, so every peer held its own copy of an update's freed activations (~0.8 GB for SmolLM2's 16-row micro-batches): 3
adapter peers of the demo's recipe peaked at 5.0 GB, 1 peer at 2.4 GB. With one heap (and
updates taking turns, ``GRPOLearner.train``), the peers reuse the same pages: 3.4 GB
(2026-11-28, 2 cores, load 6-7, ``OMP_NUM_THREADS=1``). A process of one peer (a torchrun rank,
a HiveMind peer) keeps glibc's arenas: its other threads (transport, scoring) allocate beside
the peer's without waiting on one heap's lock.

Only glibc has ``mallopt``; elsewhere (musl, macOS) nothing changes. Left alone when the user
chose an allocator: any ``MALLOC_*`` tunable of glibc in the environment, ``GLIBC_TUNABLES``, a
preloaded jemalloc/tcmalloc/mimalloc, or ``GENRL_SWARM_HEAP=default`` (or ``off``, ``0``).
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Mapping

log = logging.getLogger(__name__)

ENV = "GENRL_SWARM_HEAP"
KEEP = 256 << 20  # bytes of free memory glibc may keep at the heap's top
MMAP_FROM = 32 << 20  # blocks this large or larger are mapped (glibc's maximum threshold on 64-bit)
# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
ARENAS = 1  # heaps the process's threads share

_PRELOADED = ("jemalloc", "tcmalloc", "mimalloc")
OFF = frozenset({"default", "off", "0", "false", "no", "none"})  # GENRL_SWARM_HEAP values that leave malloc alone
_done: bool | None = None  # what the first call decided: the setting is process-wide
_shared: bool | None = None  # whether the process's threads were given one heap (``one_heap``)


def users_choice(env: Mapping[str, str]) -> str | None:
    """Why the heap is left as it is (the user chose), or None. Pure: reads only ``env``."""
    if (value := env.get(ENV, "").strip().lower()) in OFF:
        return f"{ENV}={value}"
    if name := next((k for k in sorted(env) if k.startswith("MALLOC_") or k == "GLIBC_TUNABLES"), None):
        return name
    preload = env.get("LD_PRELOAD", "")
    if lib := next((lib for lib in _PRELOADED if lib in preload), None):
        return f"LD_PRELOAD {lib}"
    return None


def keep_freed_memory(one_heap: bool = False) -> bool:
    """Keep freed memory in this process's heap (decided once: the setting is process-wide);
    ``one_heap``: the process hosts several peers, whose threads then share one heap (only
    effective before they first allocate). True if glibc took the setting."""
    global _done, _shared
    if _done is None:
        _done = _apply(((M_TRIM_THRESHOLD, KEEP), (M_MMAP_THRESHOLD, MMAP_FROM)))
        log.debug("heap: freed memory kept (blocks under %d MB, %d MB at the top): %s", MMAP_FROM >> 20, KEEP >> 20, _done)
    if one_heap and _shared is None:
        _shared = _apply(((M_ARENA_MAX, ARENAS),))
        log.debug("heap: the in-process peers share %d heap(s): %s", ARENAS, _shared)
    return _done


def _apply(settings: tuple[tuple[int, int], ...]) -> bool:
    """glibc's ``mallopt`` of each (parameter, value); False when the user chose the allocator or it is not glibc."""
    if (reason := users_choice(os.environ)) is not None:
        log.debug("heap: left to the allocator's settings (%s)", reason)
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    results = [mallopt(param, value) for param, value in settings]  # each is set whatever another returned
    return all(results)
