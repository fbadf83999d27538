"""Every msgspec decoder of this process, each built once, under one lock.

Why (issue 43): msgspec builds a type's decoding info lazily, on its first ``Decoder``,
``decode(type=...)`` or ``convert``, and caches it on the type (for a generic such as
``Envelope[TokenRollout]``, on the alias) *before* it has filled in the field types. Filling them
calls back into Python (``typing`` resolves the annotations of every nested struct), where the GIL
can pass to another thread. A thread that meets the half-built info in that window takes it as
ready, decodes through a field type that is still NULL, and the whole process dies with SIGSEGV
in msgspec's ``mpack_decode``. In-process peers hit it when they decode their first payloads at
once (``benchmarks/bench_decoder_race.py``: 29 of 40 processes crashed before this module, none since).

The rule, kept here only: a decoder is built by ``msgpack_decoder``/``json_decoder``, which
serialize every build behind one process-wide lock and publish a decoder only once it is
complete; a finished decoder is shared by all threads (msgspec's ``decode`` is thread-safe).
Types a thread decodes with ``msgspec.convert`` or ``decode(type=...)`` are ``warm``-ed first.
``GameManager`` warms its game's envelope before the peer threads start; module-level decoders
are built at import, through the same lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from genrl_swarm.core.bodies import Body, Envelope

D = TypeVar("D")
T = TypeVar("T")

#: Re-entrant, so that a build that somehow leads to another (an import that builds its module's
#: decoders) cannot deadlock its own thread.
_lock = threading.RLock()
#: (decoder class, type) -> the finished decoder. Read without the lock: only finished ones are in it.
_built: dict[tuple[Any, Any], Any] = {}


def _once(kind: Callable[[Any], D], type_: Any) -> D:
    key = (kind, type_)
    found: D | None = _built.get(key)
    if found is None:
        with _lock:
            found = _built.get(key)
            if found is None:
                found = _built[key] = kind(type_)
    return found


def msgpack_decoder(type_: type[T]) -> msgspec.msgpack.Decoder[T]:
    """The process's MessagePack decoder of ``type_``."""
    return _once(msgspec.msgpack.Decoder, type_)


def json_decoder(type_: type[T]) -> msgspec.json.Decoder[T]:
    """The process's JSON decoder of ``type_``."""
    return _once(msgspec.json.Decoder, type_)


def _envelope(body_type: type[Body]) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(Envelope[body_type])  # type: ignore[valid-type]


def envelope_decoder(body_type: type[Body]) -> msgspec.msgpack.Decoder[Any]:
    """The decoder of a payload whose bodies are all ``body_type`` (``comm.codec``), keyed by
    the body type: no ``Envelope[...]`` alias is made (nor hashed) per payload."""
    return _once(_envelope, body_type)


def warm(*types: Any) -> None:
    """Build the decoding info of ``types`` now, so a later ``msgspec.convert`` or
    ``decode(type=...)`` from any thread finds it complete instead of building it."""
    for type_ in types:
        msgpack_decoder(type_)
