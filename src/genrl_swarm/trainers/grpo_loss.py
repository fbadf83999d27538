"""GRPO / DAPO objective as pure tensor functions (tested against hand-computed values).

Advantages are normalised within each group of completions of one prompt; the surrogate is
PPO's clipped ratio with separate lower/upper clip ranges (DAPO's clip-higher); an optional
k3 KL estimate keeps the policy near a frozen reference.
"""

from __future__ import annotations

from typing import Literal

import torch

Scale = Literal["group", "batch", "none"]
Aggregation = Literal["token", "sequence"]


def group_advantages(rewards: list[torch.Tensor], scale: Scale = "group", eps: float = 1e-4) -> list[torch.Tensor]:
    """Advantage of each completion: reward minus its group's mean, divided by a std.

    ``group`` divides by the group's std (GRPO), ``batch`` by the std of all rewards in the
    batch (less noisy for small groups), ``none`` not at all (Dr. GRPO).
    """
    centred = [r - r.mean() for r in rewards]
    if scale == "none":
        return centred
    if scale == "batch":
        std = torch.cat(rewards).std(unbiased=False) if rewards else torch.tensor(1.0)
        return [c / (std + eps) for c in centred]
    return [c / (r.std(unbiased=False) + eps) for c, r in zip(centred, rewards)]


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1 (>= 0, unbiased)."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float,
    eps_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO objective (to *maximise*) and a mask of tokens where clipping was active.

    logp/old_logp: [B, T]; advantages: [B] (one per sequence, broadcast over tokens).
    """
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv
    objective = torch.minimum(unclipped, clipped)
    return objective, (clipped < unclipped).float()


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    beta: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    aggregation: Aggregation = "token",
    total_tokens: float | None = None,
    total_sequences: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss of a micro-batch, normalised by the *whole* batch's size so accumulating micro-batch
    gradients equals one full-batch step.

    ``token`` aggregation averages over every completion token of the batch (DAPO: long answers
    count per token); ``sequence`` averages tokens within a sequence, then sequences (GRPO).
    """
    objective, clipped = clipped_surrogate(logp, old_logp, advantages, eps_low, eps_high)
    per_token = -objective
    kl = torch.zeros_like(per_token)
    if beta > 0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs reference log-probs")
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + beta * kl
    mask = mask.to(per_token.dtype)
    lengths = mask.sum(1).clamp(min=1)
    if aggregation == "token":
        denom = total_tokens if total_tokens is not None else float(mask.sum().clamp(min=1))
        loss = (per_token * mask).sum() / denom
    else:
        denom = total_sequences if total_sequences is not None else float(mask.shape[0])
        loss = ((per_token * mask).sum(1) / lengths).sum() / denom
    n = float(mask.sum().clamp(min=1))
    stats = {
        "clip_frac": float((clipped * mask).sum()) / n,
        "kl": float((kl * mask).sum()) / n,
    }
    return loss, stats
