"""LoRA adapters in the lean sampler's packed decode path: x·W + (x·A)·B on a shared packed W.

Why: an adapter peer's model is a shell over a base it shares with the other peers of its process
(``lm.shared_base``); its LoRA layers are peft's. The sampler's fast path multiplies by weights
packed for oneDNN (``lm.packed``), which a LoRA layer used to turn off (1.13-1.27x slower on
SmolLM2). Packing the base once for every peer and adding each peer's low-rank term keeps the fast
path without a per-peer copy of the base. The alternative, merging each peer's adapters into a
packed copy of its own, costs a full copy of the weights per peer and a repack after every update;
``benchmarks/bench_adapters.py`` measures both (docs/benchmarks.md).

The low-rank terms follow the fused matmuls: q/k/v share one ``A`` (their A's side by side) and a
block-diagonal ``B``, as do gate/up, so a layer adds four small matmul pairs at most. They are
built from the live LoRA tensors on every sampling call (microseconds per layer), so they never
go stale when the learner steps the adapters in place.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from genrl_swarm.paradigms.lm.packed import PackedLinear, PackedWeights, base_linear


@dataclass(frozen=True)
class LowRank:
    """x -> (x · down) · up: ``down`` [in, r], ``up`` [r, out] (LoRA's A^T and scale · B^T)."""

    down: torch.Tensor
    up: torch.Tensor

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x @ self.down) @ self.up


@dataclass(frozen=True)
class AdaptedLinear:
    """A packed base map plus a peer's low-rank term: the interface of ``PackedLinear``."""

    base: PackedLinear
    low: LowRank

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        return self.base.add(flat, self.low(flat)).view(*x.shape[:-1], -1)

    def add(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.base.add(x, residual + self.low(x))


@dataclass(frozen=True)
class Factors:
    """One LoRA layer's factors as its forward uses them: A [r, in], B [out, r], the scale."""

    a: torch.Tensor
    b: torch.Tensor
    scale: float


def factors(module: Any) -> Factors | None | bool:
    """A projection's LoRA factors; None where it computes with its base weights alone (a plain
    ``nn.Linear``, adapters off); False where the packed path cannot reproduce it (another adapter
    type, DoRA, several active adapters, adapters merged into the weights): the modules run then."""
    if type(module) is torch.nn.Linear:
        return None
    lora_a, lora_b = getattr(module, "lora_A", None), getattr(module, "lora_B", None)
    if lora_a is None or lora_b is None or type(getattr(module, "base_layer", None)) is not torch.nn.Linear:
        return False
    if getattr(module, "merged", False):
        return False
    active = [n for n in module.active_adapters if n in lora_a]
    if not active or getattr(module, "disable_adapters", False):
        return None
    if len(active) > 1 or getattr(module, "lora_variant", {}):
        return False
    name = active[0]
    return Factors(lora_a[name].weight, lora_b[name].weight, float(module.scaling[name]))


def fused(modules: list[Any]) -> LowRank | None | bool:
    """The low-rank term of ``modules``' fused matmul (outputs side by side): their A's stacked,
    their B's block-diagonal. None when none is adapted; False when one cannot be reproduced."""
    found = [factors(m) for m in modules]
    if any(f is False for f in found):
        return False
    if all(f is None for f in found):
        return None
    downs, ups = [], []
    for module, f in zip(modules, found, strict=True):
        if isinstance(f, Factors):
            downs.append(f.a.detach().t())
            ups.append(f.b.detach().t() * f.scale)
        else:  # not adapted: its columns of the block-diagonal B stay zero
            ups.append(base_linear(module).weight.new_zeros(0, base_linear(module).out_features))
    return LowRank(torch.cat(downs, dim=1), torch.block_diag(*ups))


def adapt(packed: PackedWeights, layers: Any, head: Any) -> PackedWeights | None:
    """``packed`` (the base's) with the LoRA terms of ``layers`` and ``head`` (the peer's modules) added; the
    same object when nothing is adapted; None when some layer cannot be reproduced packed."""
    if factors(head) is not None:
        return None  # an adapted head (not among the usual targets) runs as a module
    out = []
    for layer, weights in zip(layers, packed.layers, strict=True):
        attn, mlp = layer.self_attn, layer.mlp
        groups = {
            "qkv": [attn.q_proj, attn.k_proj, attn.v_proj],
            "o": [attn.o_proj],
            "gate_up": [mlp.gate_proj, mlp.up_proj],
            "down": [mlp.down_proj],
        }
        changes: dict[str, AdaptedLinear] = {}
        for name, modules in groups.items():
            low = fused(modules)
            if low is False:
                return None
            if isinstance(low, LowRank):
                changes[name] = AdaptedLinear(getattr(weights, name), low)
        out.append(replace(weights, **changes) if changes else weights)  # type: ignore[arg-type]
    if all(a is b for a, b in zip(out, packed.layers, strict=True)):
        return packed
    return PackedWeights(tuple(out), packed.head)
