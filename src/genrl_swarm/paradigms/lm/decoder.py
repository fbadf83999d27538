"""A decode-only forward of Llama-family models over a preallocated KV buffer.

Why not the model's own forward with a ``DynamicCache``: every decode step concatenates each
layer's keys and values onto the cache (a copy of the whole cache per token: ~0.4 GB per step
for SmolLM2 at 64 rows x 128 positions in fp32), builds a fresh 4-D attention mask, and walks
several layers of generic Python (cache classes, mask factories, kwargs plumbing). Here the
keys and values of all layers live in one tensor allocated once, a step writes one column of
it, and attends over the columns written so far under a boolean mask (for padding): columns
past the step are never read, so the buffer is never zeroed, and early steps read fewer keys
than late ones.

It reuses the model's own modules (norms, projections, MLP, rotary embedding, head), so LoRA
layers, biases (Qwen2) and RoPE scaling variants behave exactly as in the model; only the
attention plumbing is ours. Architectures whose layers do more than this (q/k norms, sliding
windows, soft-capping), and dynamic-NTK RoPE (its rotary keeps state between calls), are refused
by ``supports`` and sample through the model's forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from genrl_swarm.paradigms.lm import packed as packing

#: model_type values whose decoder layer is exactly: norm, q/k/v, RoPE, attention, o, norm, gated MLP.
SUPPORTED_TYPES = ("llama", "qwen2")
#: A prefix shared by every prompt of a prefill is run once when it has at least this many
#: tokens (shorter ones do not repay the second, narrow pass over the layers).
SHARED_PREFIX_MIN = 16


def base_model(model: Any) -> Any:
    """The ``*ForCausalLM`` under a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def supports(model: Any) -> bool:
    """True when ``Decoder`` computes exactly what ``model``'s forward computes."""
    config = getattr(base_model(model), "config", None)
    if config is None or getattr(config, "model_type", None) not in SUPPORTED_TYPES:
        return False
    if getattr(config, "use_sliding_window", False):
        return False
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type") == "dynamic":
        return False  # HF's dynamic-NTK rotary keeps state across calls: a split prefill turns it differently
    return getattr(config, "hidden_act", "silu") == "silu"


@dataclass
class KVBuffer:
    """Keys and values of every layer: ``data`` is [layers, 2, rows, kv_heads, width, head_dim].

    ``valid`` [rows, width] marks the positions a row may attend to (its real prompt tokens and
    the tokens generated so far). Columns past the current step hold whatever memory held (never
    read); every column before it holds finite values.
    """

    data: torch.Tensor
    valid: torch.Tensor

    def compact(self, active: torch.Tensor) -> tuple[KVBuffer, torch.Tensor]:
        """Only the rows marked in ``active`` [R], as the first ``A = active.sum()`` rows of this
        buffer, and ``order`` [A]: which old row each new row is.

        Why in place: a copy of the kept rows (``index_select``) moves the whole cache (SmolLM2,
        64 rows x 108 columns in fp32: ~320 MB), so it paid only after many rows had finished,
        and until then every finished row rode along at a full row's cost. Here each finished
        row among the first A takes the place of a still-active row from behind them, so only
        the finished rows' worth of keys and values move (~5 MB a row there), and the result is
        a view of the first A rows (each layer's keys stay contiguous). Rows change order; the
        caller follows ``order``."""
        alive = int(active.sum())
        order = torch.arange(alive, device=active.device)
        holes = (~active[:alive]).nonzero().squeeze(1)
        if len(holes):  # as many still-active rows lie past ``alive`` as there are holes before it
            movers = active[alive:].nonzero().squeeze(1) + alive
            self.data[:, :, holes] = self.data[:, :, movers]
            self.valid[holes] = self.valid[movers]
            order[holes] = movers
        return KVBuffer(self.data[:, :, :alive], self.valid[:alive]), order


def shared_prefix(ids: torch.Tensor, mask: torch.Tensor) -> int:
    """How many first tokens every left-padded prompt in ``ids``/``mask`` [B, L] has in common,
    leaving each prompt at least one token of its own (its last position gives its logits).
    0 unless every mask is left padding followed only by real tokens."""
    lengths = mask.sum(1)
    if not bool((mask.flip(1).cumprod(1).sum(1) == lengths).all()):
        return 0
    shortest = int(lengths.min())
    if shortest < 2:
        return 0
    columns = (ids.shape[1] - lengths)[:, None] + torch.arange(shortest, device=ids.device)[None]  # each row's first tokens
    first = ids.gather(1, columns)
    same = (first == first[:1]).all(0)
    return int(same.long().cumprod(0).sum().clamp(max=shortest - 1))


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE in the rotate-half layout of HF Llama: x*cos + (-x2, x1)*sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


@dataclass(frozen=True)
class RopeTables:
    """One decode step's RoPE tables, [R, heads + kv_heads, D]: the query heads, then the key heads.

    ``rotate`` is x*cos + cat(-x2, x1)*sin; here x*cos + cat(x2, x1)*sin' with sin' = cat(-sin1,
    sin2), the same products (a sign moved between factors is exact), in four kernels for q and
    k together instead of ten. The query rows also carry the attention scale (exact when it is a
    power of two, as for head_dim 64; otherwise a rounding step)."""

    cos: torch.Tensor
    sin: torch.Tensor

    @classmethod
    def of(cls, cos: torch.Tensor, sin: torch.Tensor, heads: int, kv_heads: int, scale: float) -> RopeTables:
        half = cos.shape[-1] // 2
        signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)

        def table(t: torch.Tensor) -> torch.Tensor:  # [R, D] -> [R, heads + kv_heads, D]
            return torch.cat((t[:, None].expand(-1, heads, -1) * scale, t[:, None].expand(-1, kv_heads, -1)), dim=1)

        return cls(table(cos), table(signed))

    def turn(self, x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * self.cos + torch.cat((x[..., half:], x[..., :half]), dim=-1) * self.sin


class Decoder:
    """Prefill and one-token steps of a supported model, writing into a ``KVBuffer``."""

    def __init__(self, model: Any) -> None:
        if not supports(model):
            raise ValueError(f"Decoder does not support {type(base_model(model)).__name__}")
        causal = base_model(model)
        inner = causal.model
        config = causal.config
        self.model = causal
        self.embed, self.layers, self.norm, self.rotary, self.head = inner.embed_tokens, inner.layers, inner.norm, inner.rotary_emb, causal.lm_head
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
        self.dtype = self.embed.weight.dtype
        self.device = self.embed.weight.device
        #: the decode steps' weights packed for oneDNN (bf16 on CPU), set from a ``packed.PackCache``
        self.packed: packing.PackedWeights | None = None

    def allocate(self, rows: int, width: int) -> KVBuffer:
        """A buffer of uninitialised memory. The caller writes (or zeroes) every column before one
        is attended over: a masked score still multiplies the value it masks, and memory may hold
        NaN (0 x NaN is NaN). Not zeroing it all saved ~29 ms per SmolLM2 call at 16 new tokens
        (a strided fill of fresh pages)."""
        shape = (len(self.layers), 2, rows, self.kv_heads, width, self.head_dim)
        data = torch.empty(shape, dtype=self.dtype, device=self.device)
        return KVBuffer(data, torch.zeros((rows, width), dtype=torch.bool, device=self.device))

    def _attend(self, index: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: torch.Tensor,
                write: slice | int, mask: torch.Tensor, group: int) -> torch.Tensor:  # fmt: skip
        """Decoder layer ``index`` on x [B, T, hidden]; its keys/values go into ``kv`` [2, B*group, kvh, W, D]
        at columns ``write`` (each input row's keys to ``group`` consecutive buffer rows). On the
        packed weights when there are any: in fp32 on the AMD EPYC their matmuls were 1.47x faster
        than MKL's at a shared prefix's 33 rows and 1.13x at 96 (a prompt block's); the decode
        steps with packed weights take ``_packed_step``."""
        layer = self.layers[index]
        attn = layer.self_attn
        b, t, _ = x.shape
        fused = self.packed.layers[index] if self.packed is not None else None
        h = layer.input_layernorm(x)
        q, k, v = fused.qkv(h).split(fused.split, dim=-1) if fused else (attn.q_proj(h), attn.k_proj(h), attn.v_proj(h))
        q = q.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.reshape(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.reshape(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if isinstance(write, int):  # a decode step: one new column, attend over the columns up to it
            keys, values = kv[0, :, :, : write + 1], kv[1, :, :, : write + 1]
            keys[:, :, write], values[:, :, write] = k[:, :, 0], v[:, :, 0]
            grouped = (q * attn.scaling).reshape(b, self.kv_heads, self.heads // self.kv_heads, self.head_dim)
            out = self._decode_attention(grouped, keys, values, mask).reshape(b, self.heads, 1, self.head_dim)
        else:  # prefill: fan the block's keys out to the group's rows, attend over the columns before it too
            grouped = kv.view(2, b, group, *kv.shape[2:])
            grouped[0, :, :, :, write], grouped[1, :, :, :, write] = k[:, None], v[:, None]
            if write.start:  # after a shared prefix: its keys, then the block's, as the buffer holds them
                k, v = grouped[0, :, 0, :, : write.stop], grouped[1, :, 0, :, : write.stop]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.scaling, enable_gqa=True)
        out = out.transpose(1, 2).reshape(b, t, -1)
        x = x + (fused.o(out) if fused else attn.o_proj(out))
        h = layer.post_attention_layernorm(x)
        return x + (fused.down(packing.gated(fused, h)) if fused else layer.mlp(h))

    @staticmethod
    def _decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """One query per row over the ``C`` columns written so far, as two batched matmuls: q
        [R, kvh, group, D] (already scaled; the query heads sharing a kv head stacked as rows of
        one matmul, so no key is repeated), keys/values [R, kvh, C, D], ``bias`` [R, 1, 1, C] 0
        where a key is visible and -inf elsewhere. Returns [R, kvh, group, D].

        Why not ``scaled_dot_product_attention``: on CPU with a mask and a single query it runs a
        flash kernel that costs ~25 ms per layer at 64 rows in bf16 (more than the layer's matmuls).
        The softmax runs in fp32 as in HF's eager attention."""
        scores = torch.matmul(q, keys.transpose(-1, -2))
        return torch.matmul(torch.softmax(scores.float().add_(bias), dim=-1).to(values.dtype), values)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The head's logits of the last layer's hidden states ``x`` (normed here), on the packed head when there is one."""
        return (self.packed.head if self.packed is not None else self.head)(self.norm(x))

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, group: int, width: int) -> tuple[KVBuffer, torch.Tensor]:
        """Run left-padded prompts ``ids``/``mask`` [B, L] once; returns a buffer of B*group rows and
        ``width`` columns (prompts in the first L) and the last position's logits [B*group, V].

        A prefix every prompt starts with (a system prompt and the chat template, often most of a
        GRPO prompt) is run once, for all rows, when it is at least ``SHARED_PREFIX_MIN`` tokens:
        then the buffer holds it in columns [0, P) and each prompt's rest, left-padded, in
        [P, longest prompt); positions are the same as in one pass, so the keys are too."""
        b, length = ids.shape
        shared = shared_prefix(ids, mask) if b > 1 else 0
        if shared < SHARED_PREFIX_MIN:
            buffer = self.allocate(b * group, width)  # the prompt's columns are written below
            keep = mask.bool()
            x = self._block(ids, keep, (mask.cumsum(1) - 1).clamp(min=0), buffer, 0, group)
            buffer.valid[:, :length] = keep.repeat_interleave(group, 0)
        else:
            lengths = mask.sum(1)
            rest = int(lengths.max()) - shared
            buffer = self.allocate(b * group, width)
            buffer.data[..., shared + rest : length, :].zero_()  # columns no prompt reaches (masked), if any
            prefix = ids[:1, length - int(lengths[0]) :][:, :shared]
            self._block(prefix, torch.ones_like(prefix, dtype=torch.bool), torch.arange(shared, device=ids.device)[None], buffer, 0, b * group)
            keep = torch.arange(rest, device=ids.device)[None] >= (rest - (lengths - shared))[:, None]
            x = self._block(ids[:, length - rest :], keep, shared + (keep.cumsum(1) - 1).clamp(min=0), buffer, shared, group)
            buffer.valid[:, :shared] = True
            buffer.valid[:, shared : shared + rest] = keep.repeat_interleave(group, 0)
        logits = self.logits(x[:, -1:])[:, 0]
        return buffer, logits.repeat_interleave(group, 0) if group > 1 else logits

    def _block(self, ids: torch.Tensor, keep: torch.Tensor, positions: torch.Tensor, buffer: KVBuffer, start: int, group: int) -> torch.Tensor:
        """Tokens ``ids`` [B, T] (``keep``: real, not padding) through every layer, their keys and
        values into columns [start, start + T) of each input row's ``group`` buffer rows; the
        columns before ``start`` (a shared prefix) are visible to every query. Returns the last
        layer's hidden states [B, T, hidden]."""
        t = ids.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=ids.device).tril()
        # A padding query sees only itself (a row with no visible key would give NaN); real
        # queries never see padding keys, so what padding positions compute is never used.
        attend = (causal & keep[:, None, :]) | torch.eye(t, dtype=torch.bool, device=ids.device)
        return self.block(ids, positions, attend, buffer, start, group)

    def block(self, ids: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor, buffer: KVBuffer, start: int, group: int = 1) -> torch.Tensor:
        """``_block`` with the block's own attention pattern: ``attend`` [B, T, T] says which of the
        block's tokens each query sees (every query must see at least itself); the columns before
        ``start`` are visible to every query. Teacher-forced checks (``lm.teacher_forced``) lay
        several completions of one prompt side by side in one row this way."""
        b, t = ids.shape
        if start:
            attend = torch.cat([attend.new_ones(b, t, start), attend], dim=2)
        attend = attend[:, None]
        x = self.embed(ids)
        cos, sin = self.rotary(x, positions)
        cos, sin = cos[:, None], sin[:, None]
        for i in range(len(self.layers)):
            x = self._attend(i, x, cos, sin, buffer.data[i], slice(start, start + t), attend, group)
        return x

    def step(self, token: torch.Tensor, position: torch.Tensor, buffer: KVBuffer, column: int) -> torch.Tensor:
        """Feed ``token`` [R] at ``position`` [R]; its keys/values go to ``column``. Returns logits [R, V]."""
        buffer.valid[:, column] = True
        seen = buffer.valid[:, : column + 1]
        bias = torch.zeros(seen.shape, dtype=torch.float32, device=token.device).masked_fill_(~seen, float("-inf"))
        mask = bias[:, None, None, :]
        x = self.embed(token[:, None])
        cos, sin = self.rotary(x, position[:, None])
        if self.packed is not None:
            return self._packed_step(x[:, 0], cos[:, 0], sin[:, 0], buffer, column, mask)
        cos, sin = cos[:, None], sin[:, None]
        for i in range(len(self.layers)):
            x = self._attend(i, x, cos, sin, buffer.data[i], column, mask, 1)
        return self.logits(x)[:, 0]

    def _packed_step(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, buffer: KVBuffer, column: int, mask: torch.Tensor) -> torch.Tensor:
        """``step`` on the packed weights, x [R, hidden], in as few kernels as it takes.

        Why a path of its own: at 64 rows a layer's four matmuls are ~75% of a step and the
        ~35 small kernels around them most of the rest (fp32 SmolLM2, AMD EPYC, 2026-11-27).
        Here RoPE turns the query and key heads together with tables built once per step
        (``RopeTables``: the attention scale folded into the query rows), the query heads are
        already grouped per kv head, and oneDNN adds the residual inside the o and down matmuls."""
        r = x.shape[0]
        h, kvh, d = self.heads, self.kv_heads, self.head_dim
        assert self.packed is not None
        rope = RopeTables.of(cos, sin, h, kvh, float(self.layers[0].self_attn.scaling))
        for i, (layer, fused) in enumerate(zip(self.layers, self.packed.layers, strict=True)):
            qkv = fused.qkv(layer.input_layernorm(x))  # [R, (h + 2 kvh) * d]
            qk = rope.turn(qkv[:, : (h + kvh) * d].view(r, h + kvh, d))  # q (scaled) and k heads, contiguous
            keys, values = buffer.data[i, 0, :, :, : column + 1], buffer.data[i, 1, :, :, : column + 1]
            keys[:, :, column], values[:, :, column] = qk[:, h:], qkv[:, (h + kvh) * d :].view(r, kvh, d)
            out = self._decode_attention(qk[:, :h].view(r, kvh, h // kvh, d), keys, values, mask)
            x = fused.o.add(out.view(r, h * d), x)
            x = fused.down.add(packing.gated(fused, layer.post_attention_layernorm(x)), x)
        return self.logits(x)
