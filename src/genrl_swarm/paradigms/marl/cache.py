"""JAX's persistent compilation cache, so a second run of a MARL recipe starts in seconds.

A run compiles the team's rollout, update, evaluation and replay (XLA, ~15 s of CPU on 2 cores
for the default recipe). With the cache on, every compiled program is written to disk under its
HLO's hash, and a later process (the next run, the other peers of a torchrun or HiveMind swarm,
the tests) loads it instead of compiling. Results are bit for bit those of a fresh compile: the
cache holds the same executable.

Where (first match): ``JAX_COMPILATION_CACHE_DIR`` (the user's own JAX setting, left as it is),
then ``GENRL_SWARM_JAX_CACHE`` (a directory; ``off`` or ``0`` disables it), then
``$GENRL_SWARM_CACHE/jax`` (default ``~/.cache/genrl_swarm/jax``, where the LM models' cache is
too). JAX caches only programs that took a second or more to compile and are big enough for its
file system; every program of a team is small, so both floors are lowered to 0 unless the user
set them (``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS``, ``..._MIN_ENTRY_SIZE_BYTES``). The
directory grows by ~1 MB per (environment, system, shape) and can be deleted at any time.

:func:`enable` runs before the first compilation (``Team`` and ``Verifier`` call it); a compile
that ran before it in the process latched JAX's cache off, so it resets JAX's cache state once.
:func:`counts` reports this process's hits and misses (JAX's monitoring events).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import jax
from jax._src import compilation_cache as _jax_cache_state  # whether a compile already latched it (no public API)
from jax.experimental.compilation_cache import compilation_cache

log = logging.getLogger(__name__)

ENV = "GENRL_SWARM_JAX_CACHE"
OFF = frozenset({"off", "0", "false", "no", "none", ""})

_lock = threading.Lock()
_enabled: Path | None = None
_done = False
_counts: Counter[str] = Counter()
_saved_s = 0.0

_EVENTS = {
    "/jax/compilation_cache/compile_requests_use_cache": "requests",
    "/jax/compilation_cache/cache_hits": "hits",
    "/jax/compilation_cache/cache_misses": "writes",
}


def _on_event(event: str, **_: Any) -> None:
    if (name := _EVENTS.get(event)) is not None:
        _counts[name] += 1


def _on_duration(event: str, duration_secs: float, **_: str | int) -> None:
    global _saved_s
    if event == "/jax/compilation_cache/compile_time_saved_sec":
        _saved_s += duration_secs


def _jax_dir() -> str | None:
    """JAX's own setting: ``JAX_COMPILATION_CACHE_DIR`` or a ``jax.config.update`` (ours included)."""
    value = getattr(jax.config, "jax_compilation_cache_dir", None)
    return str(value) if value else None


def default_dir() -> Path:
    return Path(os.environ.get("GENRL_SWARM_CACHE", Path.home() / ".cache" / "genrl_swarm")) / "jax"


def cache_dir() -> Path | None:
    """Where this process's compiled programs go (None: the cache is off)."""
    if own := _jax_dir():  # JAX_COMPILATION_CACHE_DIR or the user's config.update
        return Path(own)
    value = os.environ.get(ENV)
    if value is not None:
        return None if value.strip().lower() in OFF else Path(value).expanduser()
    return default_dir()


def enable() -> Path | None:
    """Turn the persistent cache on for this process (once; later calls return the same)."""
    global _enabled, _done
    with _lock:
        if _done:
            return _enabled
        _done = True
        jax.monitoring.register_event_listener(_on_event)
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        directory = cache_dir()
        if directory is None:
            log.info("JAX compilation cache: off (%s)", ENV)
            return None
        if not _jax_dir():
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as e:  # a read-only home: compile every time, as without the cache
                log.warning("JAX compilation cache: off, cannot create %s: %s", directory, e.strerror or e)
                return None
            jax.config.update("jax_compilation_cache_dir", str(directory))
        if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        if "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES" not in os.environ:
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # -1: no floor
        if getattr(_jax_cache_state, "_cache_checked", True) or _jax_cache_state.is_initialized():
            compilation_cache.reset_cache()  # an earlier compile in this process latched the cache off
        _enabled = directory
        log.info("JAX compilation cache: %s", directory)
        return directory


def counts() -> dict[str, float]:
    """This process's persistent-cache traffic: compile requests, hits, writes, seconds saved."""
    return {"requests": _counts["requests"], "hits": _counts["hits"], "writes": _counts["writes"], "saved_s": round(_saved_s, 3)}
