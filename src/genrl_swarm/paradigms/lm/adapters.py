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

from dataclasses import dataclass, field, replace
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


@dataclass(frozen=True)
class Term:
    """One adapted projection's LoRA term inside its (fused) map's output: columns [start, stop)
    get scale · (x · a^T) · b^T, with ``a`` [r, in] and ``b`` [out, r] the live LoRA weights."""

    start: int
    stop: int
    a: torch.Tensor
    b: torch.Tensor
    scale: float
    up: torch.Tensor = field(init=False, repr=False, compare=False)  # b^T, a view of the live b

    def __post_init__(self) -> None:
        object.__setattr__(self, "up", self.b.t())

    def add_to(self, y: torch.Tensor, x: torch.Tensor, xt: torch.Tensor | None = None) -> None:
        """y[:, start:stop] += scale · (x · a^T) · b^T, in place (one matmul accumulating into y's
        columns). x · a^T is taken as (a · x^T)^T: MKL's kernels for r = 8 output columns ran at
        half the speed of those for r = 8 rows (SmolLM2, 153 rows: 34 vs 19 us from 576 inputs,
        82 vs 46 from 1,536). ``xt``: x^T, when the caller shares it between the terms of one map."""
        y[:, self.start : self.stop].addmm_((self.a @ (x.t() if xt is None else xt)).t(), self.up, alpha=self.scale)


#: A layer's ``Term``s per fused map ("qkv", "o", "gate_up", "down"; a map without one is absent).
LayerTerms = dict[str, tuple[Term, ...]]


def _groups(layer: Any) -> dict[str, list[Any]]:
    attn, mlp = layer.self_attn, layer.mlp
    return {
        "qkv": [attn.q_proj, attn.k_proj, attn.v_proj],
        "o": [attn.o_proj],
        "gate_up": [mlp.gate_proj, mlp.up_proj],
        "down": [mlp.down_proj],
    }


def terms(layers: Any, head: Any) -> tuple[LayerTerms, ...] | None:
    """The LoRA terms of ``layers`` to add on the base's packed maps, per layer, read from the
    live modules without a copy; None where ``adapt`` gives None (an adapted head, a layer the
    packed path cannot reproduce).

    Why besides ``adapt``: a spot check loads another peer's adapter for each check and runs one
    pass with it, so ``adapt``'s fused factors (a concatenation, a block-diagonal matrix and a
    scaled copy per map: 16-18 ms for SmolLM2 with LoRA on every projection) were built for a
    single use; here each projection's term accumulates into its columns of the base map's
    output (``Term.add_to``), which also spares the low-rank output's own buffer and the pass
    that added it (``lm.teacher_forced``)."""
    if factors(head) is not None:
        return None
    out: list[LayerTerms] = []
    for layer in layers:
        found: LayerTerms = {}
        for name, modules in _groups(layer).items():
            start, group = 0, []
            for module in modules:
                f = factors(module)
                if f is False:
                    return None
                stop = start + int(base_linear(module).out_features)
                if isinstance(f, Factors):
                    group.append(Term(start, stop, f.a.detach(), f.b.detach(), f.scale))
                start = stop
            if group:
                found[name] = tuple(group)
        out.append(found)
    return tuple(out)


def adapt(packed: PackedWeights, layers: Any, head: Any) -> PackedWeights | None:
    """``packed`` (the base's) with the LoRA terms of ``layers`` and ``head`` (the peer's modules) added; the
    same object when nothing is adapted; None when some layer cannot be reproduced packed."""
    if factors(head) is not None:
        return None  # an adapted head (not among the usual targets) runs as a module
    out = []
    for layer, weights in zip(layers, packed.layers, strict=True):
        changes: dict[str, AdaptedLinear] = {}
        for name, modules in _groups(layer).items():
            low = fused(modules)
            if low is False:
                return None
            if isinstance(low, LowRank):
                changes[name] = AdaptedLinear(getattr(weights, name), low)
        out.append(replace(weights, **changes) if changes else weights)  # type: ignore[arg-type]
    if all(a is b for a, b in zip(out, packed.layers, strict=True)):
        return packed
    return PackedWeights(tuple(out), packed.head)
