"""The module the sampler runs: the learner's own model, or a lower-precision copy kept in step.

The learner keeps fp32 master weights (an exact optimiser needs them), but this CPU multiplies
bf16 several times faster than fp32. Sampling in bf16 therefore runs on a copy. The copy must
never act with stale weights: a policy's weights change through ``load_weights`` (which bumps
``LMPolicy.version``) *and*, in one process, by the learner stepping the very module the policy
holds, in place. So the copy is keyed on every parameter's storage and in-place version counter
(torch bumps it on each ``add_``/``copy_`` an optimiser or ``load_state_dict`` does); reading the
counters costs microseconds, refreshing (one cast-copy of the weights) about a forward pass.

Memory: one extra copy at half the fp32 size (SmolLM2: +270 MB on top of 540 MB). LoRA adapters
are merged into the copy, so it runs the plain architecture.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def weight_key(model: torch.nn.Module) -> tuple[tuple[int, int], ...]:
    """Changes whenever any parameter is replaced or modified in place through torch's ops (which
    bump its version counter). torch's fused optimizers (``AdamW(fused=True)``) write without
    bumping it: the learners' AdamW is the default (foreach) one, which does; a learner that
    switched to a fused one would leave the bf16 copy and the packed decode weights stale."""
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


class SamplingModel:
    """``get(model)`` returns ``model`` when it already runs in ``dtype``, else a cached copy in
    ``dtype`` refreshed whenever ``model``'s weights changed since the copy was made."""

    def __init__(self, dtype: str) -> None:
        self.dtype = DTYPES[dtype]
        self._copy: Any = None
        self._key: tuple[tuple[int, int], ...] = ()
        self.refreshes = 0  # how often the copy was (re)built; tests and benchmarks read it

    def get(self, model: Any) -> Any:
        if next(model.parameters()).dtype == self.dtype:
            return model
        key = weight_key(model)
        if self._copy is None or key != self._key:
            self._refresh(model)
            self._key = weight_key(model)  # reading a parameter does not bump its counter
        return self._copy

    @torch.no_grad()
    def _refresh(self, model: Any) -> None:
        if hasattr(model, "merge_and_unload") or self._copy is None:
            self._copy = None  # free the old copy before building the next
            fresh = copy.deepcopy(model)
            if hasattr(fresh, "merge_and_unload"):  # peft: fold the adapters into the weights
                fresh = fresh.merge_and_unload()
            self._copy = fresh.to(self.dtype).eval().requires_grad_(False)
        else:
            for dst, src in zip(self._copy.parameters(), model.parameters(), strict=True):
                dst.copy_(src)
        self.refreshes += 1
