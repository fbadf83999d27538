"""A body's next-token logits, recomputed in one teacher-forced pass on the sampler's own decoder.

Why: a spot check (``lm.verify``) recomputes the logits each of a body's tokens was drawn from.
Through the model's forward that cost 0.71 CPU-s per SmolLM2 body of 8 x 16 tokens: PEFT's
unfused LoRA modules, HF's cache and mask plumbing, the prompt's keys and values copied to every
sample, finished samples padded to the longest, the head run at every prompt position. Here the
pass runs on ``lm.decoder`` as the sampler does (with the shared base's packed, fused weights and
the sender's low-rank terms added on top, ``lm.adapters``, when the caller gives them), the prompt
once, and then the completions side by side in one row: each completion sees the whole prompt and
its own earlier tokens (a block-diagonal causal pattern over the row), at the positions it was
sampled at. No position is padding, no key is copied, and the head runs only where the next token
is one the check redoes.

On the packed weights the layers run as the sampler's packed decode step does (``packed_pass``:
q/k/v and gate/up fused, RoPE on the query and key heads at once with the attention scale folded
in, the residuals added inside oneDNN's o and down matmuls); otherwise through
``Decoder.block`` and the modules. The sender's LoRA terms (``adapters.terms``) are read from the
loaded adapter's own tensors, each projection's accumulated into its columns of the base map's
output in place (no fused copy of the factors is built for a pass that uses them once). A
completion's last token is never fed (nothing checked comes after it), and the prompt runs in the
first chunk's pass, its positions but the last one only as keys and values in the last layer
(that layer skips their queries, o and MLP); the head runs once per checked token and once for
the prompt's last position, which every completion's first token is drawn from (``drawn_from``),
and a chunk's logits are handed over as one tensor, so the verdicts read them without a copy.
SmolLM2, a body of 8 x 16 tokens after a 45-token prompt, one thread (2026-11-28, a loaded 2-core
Xeon): the model's forward 0.62-0.72 CPU-s, this pass 0.37-0.49 before the per-projection LoRA
terms and the shared first row, of which ~0.26 the packed matmuls themselves; the whole check
9-13% less CPU after (0.44 CPU-s at load 11-14, of which the pass 0.34-0.36; docs/benchmarks.md,
"Spot checks: what verification costs").

The completions are cut into chunks of at most ``CHUNK`` tokens (a whole completion each), so the
attention pattern stays small however many samples a body has; the prompt's keys stay in the
buffer's first columns and every chunk writes the columns after them. A body that fits one chunk
(every body of the benchmark's) needs no buffer: on the packed weights each layer attends over
the keys and values where its q/k/v map wrote them. The norms run as one ``F.rms_norm`` call and
RoPE's sum in place (``norm``, ``turn``): the same operations, the same bits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F

from genrl_swarm.paradigms.lm import packed as packing
from genrl_swarm.paradigms.lm.adapters import AdaptedLinear, LayerTerms, Term
from genrl_swarm.paradigms.lm.decoder import Decoder, KVBuffer, RopeTables

#: Tokens of completions per pass after the prompt. A chunk's attention pattern is CHUNK x (prompt
#: + CHUNK) booleans and its matmuls CHUNK rows tall: big enough for oneDNN's kernels to run at
#: full speed, small enough that a body of many long samples never builds a quadratic mask.
CHUNK = 512


def chunks(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices of ``lengths`` in order, grouped so that each group's total is at most ``budget``
    (a longer one alone); a length 0 joins the group before it, so no group but the first is empty."""
    out: list[list[int]] = []
    total = 0
    for i, n in enumerate(lengths):
        if not out or (n and total + n > budget):
            out.append([])
            total = 0
        out[-1].append(i)
        total += n
    return out


def layout(prefix: int, lengths: Sequence[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A row of a ``prefix`` (the prompt) and then sequences of ``lengths`` that each continue it,
    laid end to end: each token's position [T] (a sequence's first token sits right after the
    prefix) and which tokens each token sees [T, T] (the prefix causally; a sequence's token the
    whole prefix and its own sequence up to itself, never another sequence)."""
    sizes = torch.tensor([prefix, *lengths], device=device)
    owner = torch.repeat_interleave(torch.arange(len(sizes), device=device), sizes)
    offset = torch.arange(int(sizes.sum()), device=device) - (sizes.cumsum(0) - sizes)[owner]
    own = (owner[:, None] == owner[None, :]) & (offset[:, None] >= offset[None, :])
    return torch.where(owner > 0, prefix + offset, offset), own | ((owner[:, None] > 0) & (owner[None, :] == 0))


def chunk_logits(
    decoder: Decoder,
    prompt: Sequence[int],
    completions: Sequence[Sequence[int]],
    budget: int = CHUNK,
    lora: Sequence[LayerTerms] | None = None,
) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """Per chunk of whole completions: their indices, their next-token logits (float32) [R, V],
    and ``rows`` [sum of their lengths]: for each of their tokens, one completion after the other,
    the row of the logits it was drawn from (after ``prompt``, non-empty, and its tokens before it).
    Every completion's first token is drawn after the prompt alone: that row is computed once
    (row 0), not once per completion. A chunk's logits are made when the caller asks for them, so
    only one chunk's are ever held. ``lora``: the LoRA terms (``adapters.terms``) to add on
    ``decoder.packed``'s base maps."""
    if not prompt or not all(completions):
        raise ValueError("a teacher-forced pass needs a prompt and non-empty completions")
    device, start = decoder.device, len(prompt)
    fed = [list(c[:-1]) for c in completions]
    groups = chunks([len(f) for f in fed], budget)
    # One chunk on the packed weights attends over its own keys and values where they are computed:
    # no buffer to copy them into (60 copies and a 7.6 MB buffer a SmolLM2 check).
    alone = len(groups) == 1 and decoder.packed is not None
    buffer = None if alone else decoder.allocate(1, start + max(sum(len(fed[i]) for i in group) for group in groups))
    last = torch.empty(0)  # the prompt's last position: every first token is drawn from its logits
    for n, group in enumerate(groups):
        positions, attend = layout(start, [len(fed[i]) for i in group], device)
        tokens = [t for i in group for t in fed[i]]
        with torch.inference_mode():
            if n == 0:  # the prompt, then this chunk: the prompt's last position and the chunk's tokens come back
                x = run(decoder, torch.tensor([*prompt, *tokens], device=device), positions, attend, buffer, 0, lora, start - 1)
                last = x[:1]
            else:  # the prompt's keys and values are in the buffer's first columns
                x = torch.cat(
                    [last, run(decoder, torch.tensor(tokens, device=device), positions[start:], attend[start:, start:], buffer, start, lora)]
                )
            logits = decoder.logits(x).float()
        yield group, logits, drawn_from([len(fed[i]) for i in group])  # outside inference mode: the caller's code runs between chunks


def drawn_from(fed: Sequence[int]) -> torch.Tensor:
    """``chunk_logits``' rows: of completions that fed ``fed`` tokens each (all but their last),
    laid end to end after the prompt's last position (row 0), the row each of their tokens was
    drawn from: row 0 for a first token, the row of the token before it otherwise."""
    out, offset = [], 1
    for n in fed:
        out += [0, *range(offset, offset + n)]
        offset += n
    return torch.tensor(out, dtype=torch.long)


def body_logits(
    decoder: Decoder, prompt: Sequence[int], completions: Sequence[Sequence[int]], budget: int = CHUNK, lora: Sequence[LayerTerms] | None = None
) -> list[torch.Tensor]:
    """``chunk_logits``, one tensor per completion [len, V]."""
    out: list[torch.Tensor] = []
    for group, logits, rows in chunk_logits(decoder, prompt, completions, budget, lora):
        out += logits[rows].split([len(completions[i]) for i in group])
    return out


def run(
    decoder: Decoder,
    ids: torch.Tensor,
    positions: torch.Tensor,
    attend: torch.Tensor,
    buffer: KVBuffer | None,
    start: int,
    lora: Sequence[LayerTerms] | None = None,
    keep: int = 0,
) -> torch.Tensor:
    """Tokens ``ids`` [T] at ``positions`` through every layer, seeing each other as ``attend``
    [T, T] says and every column before ``start``; their keys and values into the columns after.
    The last layer's hidden states from token ``keep`` on [T - keep, hidden] (the tokens before
    only give keys and values: the last layer skips their queries, o and MLP)."""
    if decoder.packed is None:
        assert buffer is not None, "the modules' pass writes its keys and values into a buffer"
        return decoder.block(ids[None], positions[None], attend[None], buffer, start)[0, keep:]
    seen = torch.cat([attend.new_ones(len(ids), start), attend], dim=1)
    bias = torch.zeros(seen.shape, dtype=torch.float32, device=ids.device).masked_fill_(~seen, float("-inf"))
    return packed_pass(decoder, decoder.packed, ids, positions, bias, None if buffer is None else buffer.data[:, :, 0], start, lora, keep)


#: The norms ``norm`` computes as one ``F.rms_norm`` call: the decoder's supported types' own
#: (``decoder.SUPPORTED_TYPES``), whose forward is exactly its composite arithmetic.
RMS_NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm")


def norm(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)``, for an fp32 RMSNorm of ``RMS_NORMS`` as one ``F.rms_norm`` call: on CPU that is
    the module's own operations (x² averaged, + eps, rsqrt, x times it, times the weight), so the
    same bits (tests/test_teacher_forced.py), without the module call and the seven Python-level
    ops around them (~20 us of ~70 a norm at 153 rows; 61 norms a SmolLM2 check)."""
    weight = getattr(module, "weight", None)
    if type(module).__name__ in RMS_NORMS and x.dtype == torch.float32 and isinstance(weight, torch.Tensor) and weight.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, float(getattr(module, "variance_epsilon")))
    return module(x)


def turn(rope: RopeTables, x: torch.Tensor) -> torch.Tensor:
    """``rope.turn(x)``, its two products summed in the memory of the first and the second product
    taken in the rotated copy's: the same operations on the same values (the same bits), two
    153 x 12 x 64 temporaries fewer a layer."""
    half = x.shape[-1] // 2
    return (x * rope.cos).add_(torch.cat((x[..., half:], x[..., :half]), dim=-1).mul_(rope.sin))


def project(
    linear: packing.PackedLinear | AdaptedLinear, x: torch.Tensor, extra: Sequence[Term], residual: torch.Tensor | None = None
) -> torch.Tensor:
    """``linear`` of ``x`` (plus ``residual``, inside oneDNN's kernel), then each LoRA term of
    ``extra`` accumulated into its columns of that output in place."""
    y = linear(x) if residual is None else linear.add(x, residual)
    xt = x.t() if extra else None  # one transposed view for the terms of q, k and v (or gate and up)
    for term in extra:
        term.add_to(y, x, xt)
    return y


def packed_pass(
    decoder: Decoder,
    weights: packing.PackedWeights,
    ids: torch.Tensor,
    positions: torch.Tensor,
    bias: torch.Tensor,
    kv: torch.Tensor | None,
    start: int,
    lora: Sequence[LayerTerms] | None = None,
    keep: int = 0,
) -> torch.Tensor:
    """``run`` on packed weights, as ``Decoder._packed_step`` runs a decode step: ``bias`` [T, start + T]
    (0 where a key is seen, -inf elsewhere), ``kv`` [layers, 2, kv_heads, width, head_dim] (None: no
    columns before these tokens, whose keys and values are attended over where they are computed);
    ``lora``: per layer, LoRA terms added on ``weights``' maps (``adapters.terms``)."""
    t, h, kvh, d = len(ids), decoder.heads, decoder.kv_heads, decoder.head_dim
    x = decoder.embed(ids)
    cos, sin = decoder.rotary(x[None], positions[None])
    rope = RopeTables.of(cos[0], sin[0], h, kvh, float(decoder.layers[0].self_attn.scaling))
    end, final = start + t, len(decoder.layers) - 1
    for i, (layer, fused) in enumerate(zip(decoder.layers, weights.layers, strict=True)):
        extra = lora[i] if lora is not None else {}
        qkv = project(fused.qkv, norm(layer.input_layernorm, x), extra.get("qkv", ()))  # [T, (h + 2 kvh) * d]
        qk = turn(rope, qkv[:, : (h + kvh) * d].view(t, h + kvh, d))  # q (scaled) and k heads
        keys, values = qk[:, h:].transpose(0, 1), qkv[:, (h + kvh) * d :].view(t, kvh, d).transpose(0, 1)
        if kv is not None:  # after the columns before ``start``; attend over all of them
            kv[i, 0, :, start:end], kv[i, 1, :, start:end] = keys, values
            keys, values = kv[i, 0, :, :end], kv[i, 1, :, :end]
        q, seen = qk[:, :h], bias
        if i == final and keep:  # the tokens before ``keep`` gave their keys and values: nothing more is read of them
            q, seen, x = q[keep:], bias[keep:], x[keep:]
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1)[None], keys[None], values[None], attn_mask=seen[None, None], scale=1.0, enable_gqa=True
        )
        x = project(fused.o, out[0].transpose(0, 1).reshape(len(x), h * d), extra.get("o", ()), x)
        gate, up = project(fused.gate_up, norm(layer.post_attention_layernorm, x), extra.get("gate_up", ())).split(fused.inner, dim=-1)
        x = project(fused.down, F.silu(gate).mul_(up), extra.get("down", ()), x)
    return x
