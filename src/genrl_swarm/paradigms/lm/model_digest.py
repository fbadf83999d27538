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
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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


def tensors_digest(tensors: Mapping[str, torch.Tensor]) -> str:
    """The hex SHA-256 of ``tensors`` (module docstring): the same on any machine and process."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        h.update(_lp(name) + _lp(str(t.dtype)) + struct.pack("<I", t.dim()) + b"".join(struct.pack("<Q", d) for d in t.shape))
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


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
    ``slots``: ``model``'s ``adapter_slots``, when the caller keeps them (written in place)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load

    if len(blob) > MAX_ADAPTER_BYTES:
        raise ValueError(f"an adapter of {len(blob)} bytes, more than {MAX_ADAPTER_BYTES}")
    try:
        tensors = load(blob)
    except Exception as e:  # safetensors raises its own error types on malformed bytes
        raise ValueError(f"not a safetensors adapter: {e}") from e
    if tensors_digest(tensors) != digest:
        raise ValueError("the adapter's bytes do not hash to the digest committed")
    own = slots if slots is not None else adapter_state(model)
    if own.keys() != tensors.keys() or any(own[k].shape != tensors[k].shape or own[k].dtype != tensors[k].dtype for k in own):
        raise ValueError("the adapter does not fit this model's adapter (names, shapes or dtypes differ)")
    if slots is None:
        set_peft_model_state_dict(model, tensors)
        return
    with torch.no_grad():
        for name, tensor in tensors.items():
            slots[name].copy_(tensor)
