"""GRPO / DAPO objective with off-policy correction, as pure tensor functions (tested by hand).

Advantages are normalised within each group of completions of one prompt; the surrogate is
PPO's clipped ratio with separate lower/upper clip ranges (DAPO's clip-higher) around the
*proximal* policy (the learner's own log-probs before this update); an optional k3 KL keeps
the policy near a frozen reference.

Off-policy correction. A swarm rollout (or one sampled by stale weights, or at another
temperature) was drawn from a *behaviour* policy mu that is not the proximal policy. The
per-token weight w = pi_prox / mu (from the sender's behaviour log-probs) corrects for that:
- ``none``: w is ignored (plain GRPO, biased when mu != pi_prox);
- ``tis``: truncated importance sampling, the surrogate times min(w, cap) (bounded variance);
- ``decoupled``: decoupled PPO (AReaL) times w, with tokens whose w exceeds cap masked out
  (they still count in the normaliser, so micro-batches accumulate to the full batch).
Weights are detached: they reweigh the gradient, they are not optimised.

A swarm token's mu is only its sender's claim: a tiny claim raised its weight, a large one
lowered it, token by token (a cap of 1 and a plausibility check bounded the first, not the
second), and nothing a receiver holds can check it. Rows marked ``swarm`` are therefore weighted
from this peer's own policy, never the claim (issue 42.3; the group's advantages are this peer's
too: ``swarm_baseline``): a swarm token weighs min(1, n * pi_prox), n the completions this peer
draws per prompt (``behaviour_of``). A token this peer would draw about once or more among its
own n weighs what an own on-policy token weighs; one it finds unlikely weighs what it would in
expectation, n * pi_prox. That bounds what a sender picking completions can do with tokens the
receiver would rarely draw itself (selective reporting: only good-but-not-best completions, never
the best, each counted as if this peer had sampled it), as the bandit's learner weighs observed
arms by its own policy (``games/bandit/gradient.py``). Per token, n is replaced by n times this
peer's own probability of the prefix before it, divided by the swarm copies through that prefix
and token from every sender together (``swarm_budget.path_draws``): a path weighs at most
n * P(path), so no repeat, tail, other token sequence or extra id makes an answer weigh more
than this peer's own n draws would give it in expectation. With nucleus
sampling (top_p < 1) mu is the renormalised nucleus while pi_prox is the full tempered softmax,
so even on-policy weights sit below 1 (by the kept mass): the right weight for learning the
untruncated policy from truncated samples.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

Scale = Literal["group", "batch", "none"]
Aggregation = Literal["token", "sequence"]
OffPolicy = Literal["none", "tis", "decoupled"]
#: n in a swarm token's weight min(1, n * pi_prox): one number, or one per token ([B, T]).
Draws = float | torch.Tensor

#: exp() of larger log-weights overflows float32; weights this large are capped or masked anyway.
MAX_LOG_WEIGHT = 20.0


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
    """Per-token k3 estimate of KL(pi || ref) from samples of pi: exp(ref - logp) - (ref - logp) - 1 (>= 0)."""
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


def raw_weights(prox_logp: torch.Tensor, behaviour_logp: torch.Tensor) -> torch.Tensor:
    """Per-token pi_prox / mu, detached (log-weight capped at MAX_LOG_WEIGHT against overflow)."""
    return torch.exp((prox_logp - behaviour_logp).detach().clamp(max=MAX_LOG_WEIGHT))


def behaviour_of(
    prox_logp: torch.Tensor, behaviour_logp: torch.Tensor, swarm: torch.Tensor | None, draws: Draws = 1.0
) -> torch.Tensor:  # fmt: skip
    """The behaviour log-probs the weights use: the claimed ones for this peer's own rows; for
    rows another peer sent, whose claims are not read, max(log pi_prox, -log ``draws``)
    (detached), so their weight pi_prox/mu is min(1, draws * pi_prox). ``draws``: the completions
    this peer samples per prompt (inf: every swarm token weighs 1, the rule before the bound), or
    per token ([B, T]): n times the prefix's own probability, shared by its copies
    (``swarm_budget.path_draws``)."""
    if swarm is None:
        return behaviour_logp
    floor = -torch.log(draws) if isinstance(draws, torch.Tensor) else torch.tensor(-math.log(draws))
    own = torch.maximum(prox_logp.detach(), floor.to(prox_logp))
    return torch.where(swarm.unsqueeze(1) > 0, own, behaviour_logp)


def importance_weights(
    prox_logp: torch.Tensor, behaviour_logp: torch.Tensor, mode: OffPolicy, cap: float, swarm: torch.Tensor | None = None,
    draws: Draws = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(per-token weight applied to the surrogate, per-token keep mask), both detached.

    ``none``: 1 and keep all; ``tis``: min(pi_prox/mu, cap), keep all; ``decoupled``:
    pi_prox/mu, keep only tokens with pi_prox/mu <= cap. ``swarm`` ([B], 1 for a row another
    peer sent): those rows weigh min(1, ``draws`` * pi_prox) in every mode and are kept, their
    claims unread (``behaviour_of``): the bound is a defence, not an off-policy correction.
    """
    raw = raw_weights(prox_logp, behaviour_of(prox_logp, behaviour_logp, swarm, draws))
    ones = torch.ones_like(raw)
    if mode == "none":
        weight, keep = ones, ones  # the claim is not used: nothing to inflate
    elif mode == "tis":
        weight, keep = torch.minimum(raw, torch.full_like(raw, cap)), ones
    elif mode == "decoupled":
        keep = (raw <= cap).to(raw.dtype)
        weight = raw * keep
    else:
        raise ValueError(f"off_policy must be none, tis or decoupled, got {mode!r}")
    if swarm is None:
        return weight, keep
    theirs = swarm.unsqueeze(1) > 0
    return torch.where(theirs, raw, weight), torch.where(theirs, ones, keep)


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    beta: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    aggregation: Aggregation = "token",
    total_tokens: float | None = None,
    total_sequences: float | None = None,
    behaviour_logp: torch.Tensor | None = None,
    off_policy: OffPolicy = "none",
    is_cap: float = 2.0,
    swarm: torch.Tensor | None = None,
    swarm_draws: Draws = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss of a micro-batch, normalised by the *whole* batch's size so accumulating micro-batch
    gradients equals one full-batch step.

    ``old_logp`` is the proximal policy (clip centre and numerator of the importance weight);
    ``behaviour_logp`` what the tokens were sampled with. ``token`` aggregation averages over
    every completion token of the batch (DAPO); ``sequence`` averages tokens within a sequence,
    then sequences (GRPO). Stats are means over this micro-batch's tokens (``tokens`` of them);
    the importance-weight stats describe the raw weight pi_prox/mu, whatever the mode.
    ``swarm`` ([B], 1 for rows other peers sent): their claims are not read; their tokens weigh
    min(1, ``swarm_draws`` * pi_prox) (``behaviour_of``; per token: the path's share, ``swarm_budget``).
    """
    objective, clipped = clipped_surrogate(logp, old_logp, advantages, eps_low, eps_high)
    mask = mask.to(objective.dtype)
    behaviour = behaviour_of(old_logp, old_logp.detach() if behaviour_logp is None else behaviour_logp, swarm, swarm_draws)
    weight, _ = importance_weights(old_logp, behaviour, off_policy, is_cap, swarm, swarm_draws)
    per_token = -objective * weight
    kl = torch.zeros_like(per_token)
    if beta > 0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs reference log-probs")
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + beta * kl
    lengths = mask.sum(1).clamp(min=1)
    if aggregation == "token":
        denom = total_tokens if total_tokens is not None else float(mask.sum().clamp(min=1))
        loss = (per_token * mask).sum() / denom
    else:
        denom = total_sequences if total_sequences is not None else float(mask.shape[0])
        loss = ((per_token * mask).sum(1) / lengths).sum() / denom
    raw = raw_weights(old_logp, behaviour)
    n = float(mask.sum().clamp(min=1))
    mean = lambda x: float((x * mask).sum()) / n  # noqa: E731 - masked token mean
    stats = {
        "tokens": float(mask.sum()),
        "clip_frac": mean(clipped),
        "kl": mean(kl.detach()),
        "is_weight_mean": mean(raw),
        "is_weight_max": float((raw * mask).max()) if mask.any() else 1.0,
        "is_truncated_frac": mean((raw > is_cap).to(mask.dtype)),
        "behaviour_kl": mean(k3_kl(behaviour.detach(), old_logp.detach())),
    }
    return loss, stats
