"""Token log-probs from final hidden states without a [tokens, vocab] float32 tensor per batch.

``log p(y_t) = (h_t . w_y) / T - logsumexp_v((h_t . w_v) / T)``. The plain way builds all logits,
upcasts them to float32, runs ``log_softmax`` and gathers one column: for 4,096 completion
tokens and SmolLM2's 49,152-token vocabulary that is 0.8 GB per copy, and autograd keeps
several copies. ``fused_token_logps`` walks the tokens in chunks, keeps only the chunk's
logits alive, stores one float per token (the logsumexp) for the backward pass and recomputes
the chunk's logits there: the gradient of ``log p`` with respect to the logits is
``(onehot(y) - softmax) / T``, so nothing else is needed. The matmuls run in ``dtype`` (bf16
under the learner's bf16 precision), the softmax arithmetic in float32.
"""

from __future__ import annotations

from typing import Any

import torch

#: Logit elements per chunk (float32: 128 MB); large enough that each chunk is one big matmul.
CHUNK_ELEMENTS = 1 << 25


def plain_token_logps(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """The obvious computation (all logits, float32 logsumexp), kept as the lever's "off" arm."""
    logits = torch.nn.functional.linear(hidden, weight).float() / temperature
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


class _FusedTokenLogp(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float, dtype: torch.dtype
    ) -> torch.Tensor:
        w = weight.to(dtype)
        acc = torch.promote_types(torch.float32, dtype)  # softmax arithmetic: float32, or float64 in tests
        rows = max(1, CHUNK_ELEMENTS // weight.shape[0])
        out = torch.empty(hidden.shape[0], dtype=acc, device=hidden.device)
        lse = torch.empty_like(out)
        for s in range(0, hidden.shape[0], rows):
            logits = (hidden[s : s + rows].to(dtype) @ w.T).to(acc).div_(temperature)
            lse[s : s + rows] = torch.logsumexp(logits, dim=-1)
            out[s : s + rows] = logits.gather(-1, targets[s : s + rows, None]).squeeze(-1) - lse[s : s + rows]
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.temperature, ctx.dtype = temperature, dtype
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        hidden, weight, targets, lse = ctx.saved_tensors
        dtype, temperature = ctx.dtype, ctx.temperature
        w = weight.to(dtype)
        acc = lse.dtype
        rows = max(1, CHUNK_ELEMENTS // weight.shape[0])
        need_h, need_w = ctx.needs_input_grad[:2]  # a frozen head (LoRA) skips its [V, H] product per chunk
        d_hidden = torch.empty_like(hidden)
        d_weight = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        for s in range(0, hidden.shape[0], rows):
            h = hidden[s : s + rows].to(dtype)
            logits = (h @ w.T).to(acc).div_(temperature)
            g = grad[s : s + rows].to(acc)
            # d logp / d logits = (onehot(y) - softmax) / T, scaled by the incoming gradient.
            d_logits = torch.exp_(logits.sub_(lse[s : s + rows, None])).mul_(-g[:, None] / temperature)
            d_logits.scatter_add_(1, targets[s : s + rows, None], (g / temperature)[:, None])
            d_logits = d_logits.to(dtype)
            d_hidden[s : s + rows] = (d_logits @ w).to(hidden.dtype)
            if d_weight is not None:
                d_weight += (d_logits.T @ h).to(acc)
        return (d_hidden if need_h else None), (d_weight.to(weight.dtype) if d_weight is not None else None), None, None, None


def fused_token_logps(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``log softmax(hidden @ weight.T / temperature)[targets]`` for hidden [N, H], targets [N]."""
    with torch.autocast(device_type=hidden.device.type, enabled=False):  # the dtype is chosen here, explicitly
        return _FusedTokenLogp.apply(hidden, weight, targets, temperature, dtype)  # type: ignore[no-any-return]
