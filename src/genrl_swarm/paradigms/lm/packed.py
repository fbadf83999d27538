"""A decode step's weights, fused and pre-packed for oneDNN on CPU.

Why: at 64 rows a decode step's matmuls are skinny ([64, 576] x [576, N] in SmolLM2), and a
plain ``F.linear`` on CPU re-lays-out its weight on every call. In bf16 on an AMX Xeon (2 cores,
2026-11-26) the 211 projections and the head of one SmolLM2 step took 52 ms that way; with the
weights packed once per set of weights and q/k/v and gate/up fused into one matmul each, 26 ms
(packing all of them: ~0.12 s, repaid after about six steps; a whole step, attention and norms
included, is 1.23x faster). In fp32 on an AMD EPYC (Zen 3, 2 cores, 2026-11-27) MKL ran the
64-row matmuls at 62-96 GFLOP/s (the 576 x 49,152 head at 62) and oneDNN's packed kernels at
110-116; SmolLM2's sampling ran 1.13-1.27x faster (bench_generation, 16 and 64 new tokens).
On the AMX Xeon fp32 packing measured even with MKL (140-157 GFLOP/s either way), so it is on
for fp32 too.

Exactness: a packed matmul accumulates in fp32 and rounds once, as the module's call does, so
its output is the module's up to rounding: in bf16, on the AMX Xeon it was measured on, the same
bit for bit up to 64 rows (from 128 rows the plain call may pick another oneDNN kernel and round
differently: a few bf16 steps in a logit); in fp32, sums taken in another order (a few fp32
steps; ``tests/test_packed.py``). The decode step adds its residuals to the accumulator
(``PackedLinear.add``) where the modules round the matmul's output first: the same in fp32, in
bf16 one rounding fewer (in a simulation a quarter of the hidden values moved by one bf16 step;
not measured on bf16 hardware). The behaviour log-probs are always those of the logits
actually sampled from. The prefill runs on the packed weights too: in fp32 on the AMD EPYC their
matmuls were 1.47x faster than MKL's at 33 rows (a shared prefix) and 1.13x at 96.

A LoRA layer's base ``nn.Linear`` is packed like any other (an adapter peer's base is shared,
and so is its packing: ``lm.shared_base``); the peer's low-rank terms are added on top by
``lm.adapters``. Other modules that are not plain ``nn.Linear`` are never packed: ``for_decoder``
returns None and the decoder calls the modules.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F


class Decoding(Protocol):
    """What packing reads of a ``decoder.Decoder`` (named here: decoder.py imports this module)."""

    model: Any
    layers: Any
    head: Any
    dtype: torch.dtype
    device: torch.device


#: The batch size oneDNN lays a packed weight out for: a 64-row step ran equally fast on weights
#: packed for 1, 8, 64 or 512 rows (AMX Xeon), so one packing serves every batch.
ROWS_HINT = 64


#: Models narrower than this are not packed: a packed call has a larger fixed cost than MKL's.
#: fp32, 64 rows, AMD EPYC (2026-11-27), a [64, w] x [w, 3w] matmul, MKL / packed: 29 / 59 us at
#: w = 64, 163 / 170 at 192, 256 / 251 at 256, 1,065 / 761 at 512; the tiny test model (w = 64)
#: sampled in 62 ms unpacked against 82 ms packed.
MIN_WIDTH = 256


def pays(decoder: Decoding) -> bool:
    """Whether packing ``decoder``'s weights is measured to pay: ``available`` and wide enough."""
    return available(decoder.dtype, decoder.device) and int(base_linear(decoder.head).weight.shape[1]) >= MIN_WIDTH


def available(dtype: torch.dtype, device: torch.device) -> bool:
    """True where oneDNN can pack ``dtype`` on ``device``: fp32, or bf16 where it has bf16 kernels
    (whether it pays also depends on the model's width: ``pays``)."""
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if dtype == torch.float32:
        return True
    return dtype == torch.bfloat16 and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@dataclass(frozen=True)
class PackedLinear:
    """One (possibly fused) linear map with its weight in oneDNN's layout."""

    weight: torch.Tensor
    bias: torch.Tensor | None

    @classmethod
    def of(cls, modules: list[Any]) -> PackedLinear:
        """The maps of ``modules`` side by side: their outputs concatenated in this order."""
        weight = torch.cat([m.weight for m in modules]) if len(modules) > 1 else modules[0].weight
        biases = [m.bias for m in modules]
        bias = None if all(b is None for b in biases) else torch.cat([_bias(m) for m in modules])
        return cls(torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ROWS_HINT), bias)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")

    def add(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """residual + this map of ``x`` (2-D, same shape as the output), the sum taken inside
        oneDNN's kernel on its fp32 accumulator (one pass over the output instead of two)."""
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, self.weight, self.bias, "add")


def _bias(module: Any) -> torch.Tensor:
    bias = module.bias
    return bias.detach() if bias is not None else module.weight.new_zeros(module.weight.shape[0])


@dataclass(frozen=True)
class PackedLayer:
    """A decoder layer's four matmuls: q/k/v fused, o, gate/up fused, down."""

    qkv: PackedLinear
    o: PackedLinear
    gate_up: PackedLinear
    down: PackedLinear
    split: tuple[int, int, int]  # widths of q, k and v in qkv's output
    inner: int  # the MLP's width (gate and up each)


@dataclass(frozen=True)
class PackedWeights:
    layers: tuple[PackedLayer, ...]
    head: PackedLinear


def base_linear(module: Any) -> Any:
    """The ``nn.Linear`` a projection multiplies by: itself, or a LoRA layer's base layer."""
    return getattr(module, "base_layer", module)


def _plain(*modules: Any) -> bool:
    return all(type(m) is torch.nn.Linear for m in modules)


def _projections(layer: Any) -> list[Any]:
    """A layer's seven base maps, in packing order: q, k, v, o, gate, up, down."""
    attn, mlp = layer.self_attn, layer.mlp
    return [base_linear(m) for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)]


def base_weights(layers: Any, head: Any) -> list[torch.Tensor]:
    """Every weight ``for_decoder`` packs: what a packing goes stale with."""
    return [m.weight for layer in layers for m in _projections(layer)] + [base_linear(head).weight]


def weight_key(weights: list[torch.Tensor]) -> tuple[tuple[int, int], ...]:
    """Changes whenever one of ``weights`` is replaced or modified in place by torch's ops (see
    ``sampling_model.weight_key`` for the fused optimizers that do not bump the counter)."""
    return tuple((w.data_ptr(), w._version) for w in weights)


def for_decoder(layers: Any, head: Any) -> PackedWeights | None:
    """Packed base weights of every layer and the head, or None when some projection's base is
    not a plain ``nn.Linear`` (then the modules run). LoRA terms are not included (``lm.adapters``).
    The MLP is the gated SiLU one: ``decoder.supports`` admits no other activation."""
    packed = []
    for layer in layers:
        q, k, v, o, gate, up, down = _projections(layer)
        if not _plain(q, k, v, o, gate, up, down):
            return None
        packed.append(
            PackedLayer(
                qkv=PackedLinear.of([q, k, v]),
                o=PackedLinear.of([o]),
                gate_up=PackedLinear.of([gate, up]),
                down=PackedLinear.of([down]),
                split=(q.out_features, k.out_features, v.out_features),
                inner=gate.out_features,
            )
        )
    if not _plain(base_linear(head)):
        return None
    return PackedWeights(tuple(packed), PackedLinear.of([base_linear(head)]))


class PackCache:
    """The packed weights of the last weights asked for, rebuilt only when they changed.

    Packing costs ~0.12 s for SmolLM2 (a copy for each fusion, a reorder for each matrix), about
    what six packed decode steps save; a round that samples several times (stages, evaluations)
    with one set of weights packs once. The key is every packed weight's storage and in-place
    version, which changes with every optimiser step or weight load of a fully trained model, and
    never for a frozen base: adapter peers sharing a base (``lm.shared_base``) share one cache and
    one packing, whichever peer asks (thread-safe)."""

    def __init__(self) -> None:
        # A weak reference, not id(): a model rebuilt after the old one was freed (a LoRA merge)
        # may get its id and its tensors' addresses, with every version counter back at 0.
        self._first: Callable[[], Any] = lambda: None
        self._key: tuple[Any, ...] = ()
        self._packed: PackedWeights | None = None
        self._lock = threading.Lock()
        self.packs = 0  # how often weights were packed; tests read it

    def get(self, decoder: Decoding) -> PackedWeights | None:
        """Packed base weights of ``decoder``'s model, or None where packing does not apply (not
        a oneDNN CPU, bf16 without oneDNN bf16 kernels, a model narrower than ``MIN_WIDTH``, a
        projection whose base is not a plain Linear)."""
        if not pays(decoder):
            return None
        weights = base_weights(decoder.layers, decoder.head)
        key = weight_key(weights)
        with self._lock:
            if self._first() is not weights[0] or key != self._key:
                self._packed, self._key = None, ()  # free the old packing first
                self._packed, self._key = for_decoder(decoder.layers, decoder.head), key
                self._first = weakref.ref(weights[0])
                self.packs += 1
            return self._packed


def gated(layer: PackedLayer, h: torch.Tensor) -> torch.Tensor:
    """silu(gate(h)) * up(h), the input of the MLP's down map, with gate and up as one matmul."""
    gate, up = layer.gate_up(h).split(layer.inner, dim=-1)
    return F.silu(gate).mul_(up)
