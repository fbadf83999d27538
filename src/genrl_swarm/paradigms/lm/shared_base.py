"""One read-only copy of a base model per process, shared by every adapter peer in it.

Why: with full fine-tuning every peer holds its own model, its gradients and two AdamW moments
(SmolLM2-135M: ~2.2 GB a peer before activations; ``make demo``'s two peers peaked at 7.8 GB). An
adapter peer trains only LoRA factors on a frozen base, so the base can be one copy for the whole
process: each peer gets a *shell*, a copy of the module tree whose parameters and buffers are the
base's own tensors (``shell``), and LoRA layers are injected into the shell, never into the base.
The packed decode weights (``lm.packed``) of the base are shared too: they never change.

The base is frozen (``requires_grad=False``) and nobody writes it: peers train their adapters, and
anything that merges adapters into weights (a bf16 sampling copy, ``export``) does so on a copy.
Entries are held weakly: the base is freed when the last peer using it is.
"""

from __future__ import annotations

import copy
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from genrl_swarm.paradigms.lm.packed import PackCache


@dataclass(eq=False)
class SharedBase:
    """A frozen base model and its packed decode weights, one per (model, device, dtype) and process."""

    model: Any
    key: tuple[str, str, str]
    packs: PackCache = field(default_factory=PackCache)
    _digest: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def digest(self) -> str:
        """The base's digest (``lm.model_digest``), hashed once: the base never changes."""
        with self._lock:
            if not self._digest:
                from genrl_swarm.paradigms.lm.model_digest import base_state, tensors_digest

                self._digest = tensors_digest(base_state(self.model))
            return self._digest

    def shell(self) -> Any:
        """A module tree of this base for one peer: new module objects, the base's tensors."""
        return shell(self.model)


_BASES: weakref.WeakValueDictionary[tuple[str, str, str], SharedBase] = weakref.WeakValueDictionary()
_LOCK = threading.Lock()


def shared_base(name: str, device: str, dtype: str, load: Any) -> SharedBase:
    """The process's base for ``(name, device, dtype)``, loaded with ``load()`` the first time
    (peers built in threads at once load it once)."""
    key = (name, device, dtype)
    with _LOCK:
        base = _BASES.get(key)
        if base is None:
            model = load()
            model.requires_grad_(False).eval()
            base = _BASES[key] = SharedBase(model, key)
        return base


def shell(model: torch.nn.Module) -> Any:
    """A deep copy of ``model``'s modules that shares every parameter and buffer with it."""
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return copy.deepcopy(model, memo=dict(tensors))
