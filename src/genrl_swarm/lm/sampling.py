"""A lean batched sampler for GRPO rollouts.

Why not ``model.generate``: with ``num_return_sequences=G`` it copies every prompt G times and
runs the prefill G times, keeps finished rows in the batch until the longest one ends, and
pays per-step Python overhead (logits processors, stopping criteria) that dominates small
models on CPU. Here each prompt is prefilled once, its KV cache repeated G times, finished
rows are dropped from the cache, and sampling draws from a caller-owned ``torch.Generator``
so two peers in one process do not share (or race on) one RNG stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def pick(logits: torch.Tensor, temperature: float, top_p: float, greedy: bool, generator: torch.Generator | None) -> torch.Tensor:
    """Next token per row: argmax, or a temperature/nucleus sample."""
    if greedy:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(-1, descending=True)
        outside = sorted_probs.cumsum(-1) - sorted_probs > top_p  # keeps the token that crosses p
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.inference_mode()
def sample(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    n: int,
    max_new_tokens: int,
    eos_ids: Sequence[int],
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Completion ids [B * n, max_new_tokens] for left-padded prompts [B, L]; rows are grouped
    by prompt (prompt i owns rows i*n .. i*n+n-1); after EOS a row holds ``pad_id``."""
    device = input_ids.device
    positions = (attention_mask.cumsum(1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    cache, logits = out.past_key_values, out.logits[:, -1]
    next_pos = positions[:, -1:] + 1
    if n > 1:
        cache.batch_repeat_interleave(n)
        logits, attention_mask, next_pos = (x.repeat_interleave(n, 0) for x in (logits, attention_mask, next_pos))
    rows = torch.arange(logits.shape[0], device=device)  # which output row each live batch row is
    result = torch.full((logits.shape[0], max_new_tokens), pad_id, dtype=torch.long, device=device)
    eos = torch.tensor(list(eos_ids), device=device)
    for step in range(max_new_tokens):
        token = pick(logits, temperature, top_p, greedy, generator)
        result[rows, step] = token
        live = ~torch.isin(token, eos)
        if step == max_new_tokens - 1 or not bool(live.any()):
            break
        if not bool(live.all()):
            keep = live.nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            rows, token, attention_mask, next_pos = rows[keep], token[keep], attention_mask[keep], next_pos[keep]
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(rows), 1))], dim=1)
        out = model(input_ids=token[:, None], attention_mask=attention_mask, position_ids=next_pos, past_key_values=cache, use_cache=True)
        logits, next_pos = out.logits[:, -1], next_pos + 1
    return result
