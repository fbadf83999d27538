"""What a peer commits to before it generates (issue 45.3, the model side): digests of its base
and adapter, and the adapter as bytes a receiver loads onto its own copy of the base.

Why: a spot check (``lm.verify``) redoes a body's draws with the sender's model. Adapter peers
share a public base, so a sender's model is named by two digests: the base's (every peer of a run
holds it; computed once) and the adapter's (a few MB; it changes every update). A commitment that
names both binds the sender to one model before anyone checks; the adapter's bytes, fetched by
its digest from the sender or any holder, give the receiver that model, and a body that fails
the check with it is the sender's own proof of cheating.

Digest: SHA-256 over the tensors in name order, each as ``lp(name) || lp(dtype) || u32le(ndim) ||
u64le(dim)... || raw little-endian bytes`` (``lp``: a u32le length, then the UTF-8 text), so it
does not depend on a file format, a pickle or the order a state dict lists its entries.
The bytes that travel are safetensors (no pickle: a stranger's bytes never run code here).
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy
import torch

from genrl_swarm.core.interfaces import MAX_MODEL_BYTES

#: An adapter a receiver loads is at most ``MAX_MODEL_BYTES`` (core.interfaces: one limit for
#: senders, receivers and the transport); a bigger one is refused before anything is read.
MAX_ADAPTER_BYTES = MAX_MODEL_BYTES


@dataclass(frozen=True)
class ModelDigest:
    """The model a peer generates with: its base's digest and its adapter's ("" for none)."""

    base: str
    adapter: str


def _lp(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<I", len(data)) + data


def _head(name: str, dtype: torch.dtype, shape: tuple[int, ...] | list[int]) -> bytes:
    """What the digest hashes of a tensor before its bytes: its name, dtype and shape."""
    return _lp(name) + _lp(str(dtype)) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)


def tensors_digest(tensors: Mapping[str, torch.Tensor]) -> str:
    """The hex SHA-256 of ``tensors`` (module docstring): the same on any machine and process."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        h.update(_head(name, t.dtype, t.shape))
        if t.numel():  # the bytes hashed where they lie (a copy of a SmolLM2 adapter's 9.8 MB cost ~1 ms)
            h.update(t.reshape(-1).view(torch.uint8).numpy().data)
    return h.hexdigest()


#: Where each tensor of a safetensors blob lies: name -> (dtype, shape, first byte, end).
Layout = dict[str, tuple[torch.dtype, tuple[int, ...], int, int]]
#: safetensors' dtype names of the tensors ``_layout`` reads (an adapter of any other dtype is refused).
_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32}


#: Dimensions a tensor of an adapter may have (LoRA's are 2-D): more is refused before their product is taken.
MAX_DIMS = 8
#: Bytes of a header (SmolLM2's adapter: 420 tensors, ~45 KB) and its depth of nested arrays and
#: objects (a safetensors header has 3: the header, a tensor's entry, its shape).
MAX_HEADER = 1 << 20
MAX_NESTING = 3


def _nesting(text: bytes) -> int:
    """How deep ``text``'s JSON arrays and objects nest (brackets inside strings not counted), read
    without recursion: json's C decoder recurses once per level, and where a library has raised
    Python's recursion limit (py-evm and py_ecc raise it to 10**4 and more on import: the contract
    coordinator loads them) a header nested 200,000 deep overflowed the C stack: a segfault, not
    an error."""
    raw = numpy.frombuffer(text, numpy.uint8)
    quote, at = raw == ord('"'), numpy.arange(len(raw))
    last_other = numpy.maximum.accumulate(numpy.where(raw != ord("\\"), at, -1))  # the last byte up to here not a backslash
    backslashes_before = numpy.r_[0, (at - last_other)[:-1]]  # the run of backslashes just before each byte
    escaped = quote & (backslashes_before % 2 == 1)
    inside = numpy.cumsum(quote & ~escaped) % 2 == 1  # within a string (its closing quote excluded)
    opens = ((raw == ord("[")) | (raw == ord("{"))) & ~inside
    closes = ((raw == ord("]")) | (raw == ord("}"))) & ~inside
    depth = numpy.cumsum(opens.astype(numpy.int64) - closes.astype(numpy.int64))
    return int(depth.max()) if len(depth) else 0


def _layout(blob: bytes) -> Layout | None:
    """Where each tensor of safetensors ``blob`` lies: name -> (dtype, shape, first byte, end) in
    ``blob``; None unless ``blob`` is plainly well formed (a JSON header without repeated keys,
    tensors of known dtypes, each one's bytes exactly its shape's, the tensors tiling the data
    with no gap, overlap or excess; a little-endian host). Then ``load_adapter`` hashes the digest
    from ``blob`` itself and copies the tensors from it: the bytes read are those
    ``safetensors.torch.load`` makes tensors of (tests check it on the library's own files).
    Anything else is refused: the library never reads a stranger's bytes."""
    if sys.byteorder != "little" or len(blob) < 9 or blob[8:9] != b"{":
        return None
    size = int.from_bytes(blob[:8], "little")
    if size > min(len(blob) - 8, MAX_HEADER) or _nesting(blob[8 : 8 + size]) > MAX_NESTING:
        return None
    try:  # decoded as UTF-8 first: json.loads of bytes would guess UTF-16 or -32, which safetensors refuses
        header = json.loads(blob[8 : 8 + size].decode("utf-8"), object_pairs_hook=_unique)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, a key repeated, nested past the stack
        return None
    if not isinstance(header, dict):
        return None
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        return None
    start, out = 8 + size, {}
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            return None
        dtype, shape, offsets = _DTYPES.get(str(entry["dtype"])), entry["shape"], entry["data_offsets"]
        if dtype is None or not isinstance(shape, list) or not isinstance(offsets, list) or len(offsets) != 2:
            return None
        if len(shape) > MAX_DIMS or not all(type(d) is int and 0 <= d < 2**63 for d in (*shape, *offsets)):
            return None
        numel = 1
        for d in shape:  # bounded dims below 2**63 each: the product stays cheap to take
            numel *= d
        if offsets[1] - offsets[0] != numel * dtype.itemsize:
            return None
        out[name] = (dtype, tuple(shape), start + offsets[0], start + offsets[1])
    spans = sorted((first, end) for _, _, first, end in out.values())
    edges = [start] + [end for _, end in spans]
    if [first for first, _ in spans] != edges[:-1] or edges[-1] != len(blob):
        return None
    return out


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict, ValueError when a key repeats (which of two a reader keeps is its own choice)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a key repeated")
    return out


def adapter_state(model: Any) -> dict[str, torch.Tensor]:
    """The adapter's tensors as peft saves them (names without the adapter's name); {} for a
    model without adapters."""
    if not hasattr(model, "peft_config"):
        return {}
    from peft import get_peft_model_state_dict

    return {k: v.detach() for k, v in get_peft_model_state_dict(model).items()}


def base_state(model: Any) -> dict[str, torch.Tensor]:
    """Every tensor of the model but its adapters: what the base digest covers."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {k: v for k, v in inner.state_dict().items() if "lora_" not in k}


def model_digest(model: Any, base: str | None = None) -> ModelDigest:
    """``model``'s digests; ``base``: the base's, when the caller keeps it (it never changes)."""
    return ModelDigest(base or tensors_digest(base_state(model)), tensors_digest(adapter_state(model)) if hasattr(model, "peft_config") else "")


def adapter_bytes(model: Any) -> bytes:
    """The adapter as safetensors bytes: what a receiver fetches by the adapter digest."""
    from safetensors.torch import save

    return save({k: v.contiguous() for k, v in adapter_state(model).items()})


def adapter_slots(model: Any) -> dict[str, torch.Tensor] | None:
    """``adapter_state`` whose tensors are the live parameters' own storage, for ``load_adapter``
    to write in place; None where peft hands out copies. Why: peft's state-dict helpers walk the
    whole model on every call (SmolLM2 with LoRA on every projection: 25 ms to read the adapter,
    39 ms to set it); a receiver that checks a sender a round loads an adapter each time."""
    state = adapter_state(model)
    live = {p.data_ptr() for p in model.parameters()}
    return state if all(t.data_ptr() in live for t in state.values()) else None


def load_adapter(model: Any, blob: bytes, digest: str, slots: dict[str, torch.Tensor] | None = None) -> None:
    """Set ``model``'s adapter to ``blob``'s tensors, if and only if they hash to ``digest`` and
    fit the adapter ``model`` has (names, shapes, dtypes); ValueError otherwise, ``model`` unchanged.
    ``slots``: ``model``'s ``adapter_slots``, when the caller keeps them (written in place).

    A sender's bytes are read by ``_layout`` alone, never by the safetensors library: a stranger's
    bytes reach no parser we did not write (what it refuses, or anything not plainly well formed,
    is refused here). Honest adapters are ``adapter_bytes``, which it always reads."""
    if len(blob) > MAX_ADAPTER_BYTES:
        raise ValueError(f"an adapter of {len(blob)} bytes, more than {MAX_ADAPTER_BYTES}")
    layout = _layout(blob)
    if layout is None:
        raise ValueError("not a safetensors adapter this reader accepts (plainly well formed, known dtypes, a little-endian host)")
    if _blob_digest(blob, layout) != digest:
        raise ValueError("the adapter's bytes do not hash to the digest committed")
    own = slots if slots is not None else adapter_state(model)
    if own.keys() != layout.keys() or any(own[k].shape != layout[k][1] or own[k].dtype != layout[k][0] for k in own):
        raise ValueError("the adapter does not fit this model's adapter (names, shapes or dtypes differ)")
    if slots is not None and all(t.is_contiguous() and t.device.type == "cpu" for t in slots.values()):
        _write_in_place(blob, layout, slots)
        return
    tensors = {name: _tensor(blob, entry) for name, entry in layout.items()}
    if slots is None:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, tensors)
        return
    with torch.no_grad():
        for name, tensor in tensors.items():
            slots[name].copy_(tensor)


def _blob_digest(blob: bytes, layout: Layout) -> str:
    """``tensors_digest`` of ``blob``'s tensors, hashed from the bytes where they lie (the same
    heads and bytes in the same order, without making the tensors)."""
    view, h = memoryview(blob), hashlib.sha256()
    for name in sorted(layout):
        dtype, shape, first, end = layout[name]
        h.update(_head(name, dtype, shape))
        h.update(view[first:end])
    return h.hexdigest()


def _tensor(blob: bytes, entry: tuple[torch.dtype, tuple[int, ...], int, int]) -> torch.Tensor:
    """A copy of one ``_layout`` entry's bytes as its tensor."""
    dtype, shape, first, end = entry
    raw = numpy.frombuffer(blob, numpy.uint8, end - first, first).copy()
    return torch.from_numpy(raw).view(dtype).reshape(shape)


def _write_in_place(blob: bytes, layout: Layout, slots: dict[str, torch.Tensor]) -> None:
    """Each tensor copied from ``blob`` into its slot, without the copy a loader makes first.
    SmolLM2's adapter (420 tensors, 9.8 MB), one thread on a loaded 2-core Xeon (2026-11-28):
    15.8 ms through the library's load, 11.4 this way, of which the SHA-256 ~6.5 and the copy 2.5."""
    for name, (_, _, first, end) in layout.items():
        if end > first:  # numpy reads the read-only bytes without a copy (torch.frombuffer warns on them)
            slots[name].detach().reshape(-1).view(torch.uint8).numpy()[:] = numpy.frombuffer(blob, numpy.uint8, end - first, first)
    torch.autograd.graph.increment_version(list(slots.values()))  # written as copy_ would: caches keyed on versions see it
