"""The GRPO learner against plain, obviously-correct computations.

The learner's default path forwards each distinct prompt once and its completions against the
prompt's keys/values (lm/prefix.py: shared prefix, length buckets, fused log-prob gather;
micro-batch sizes 3 and 2 below cut the completions into several chunks and the prompts into
several batches); its plain path packs left-padded prompt+completion sequences into
micro-batches. Both run the LM head only over the completion positions, accumulate gradients
over micro-batches and reuse stored proximal log-probs over several epochs. The reference here does none of that:
one unpadded forward per sequence, ``log_softmax`` + gather, the clipped surrogate written out
token by token, advantages by hand. Both must give the same gradient at every epoch (with
clipping active and ratios away from 1 after the first), and the optimizer must apply exactly
AdamW with the warmup schedule to those gradients.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

pytest.importorskip("torch")
import torch

from genrl_swarm.core import GameState, Rollout, RoundRewards, ScoredRollout, Task, TokenRollout, TokenSample
from genrl_swarm.paradigms.lm.learner import GRPOLearner, Sample
from genrl_swarm.paradigms.lm.policy import LMPolicy

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
QUESTIONS = ("Calculate 1 + 2.", "Calculate 7 * 3.", "q")


@pytest.fixture(scope="module")
def policy() -> LMPolicy:
    return LMPolicy("tiny-random", {"num_generations": 4, "max_new_tokens": 10, "temperature": 1.2}, seed=5)


@pytest.fixture(scope="module")
def bodies(policy: LMPolicy) -> list[TokenRollout]:
    return policy.rollouts([Task.create(q).input(0) for q in QUESTIONS])


def plain_logps(model: Any, prompt: Sequence[int], completion: Sequence[int], temperature: float) -> torch.Tensor:
    """log p(completion[t] | prompt + completion[:t]) from one unpadded forward."""
    logits = model(input_ids=torch.tensor([[*prompt, *completion]])).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


# --------------------------------------------------------------------------- scoring
@pytest.mark.parametrize("temperature", [0.6, 1.0, 1.7])
def test_token_logps_equal_a_plain_forward(policy: LMPolicy, bodies: list[TokenRollout], temperature: float) -> None:
    """Left padding, position ids, the kept LM-head positions and the temperature, all at once
    (fails for log-probs one position off, or scored without the sampling temperature)."""
    learner = GRPOLearner(policy)
    # Completions cut to different lengths (a prefix of a sampled completion is one too): the tiny
    # model rarely samples EOS, so the sampled ones alone may all run to max_new_tokens.
    drawn = [(b.prompt_ids, s) for b in bodies for s in b.samples]
    samples = [
        Sample(p, s.completion_ids[: len(s.completion_ids) - i % 4], s.logprobs[: len(s.logprobs) - i % 4], 0.0) for i, (p, s) in enumerate(drawn)
    ]
    assert len({len(s.completion_ids) for s in samples}) > 1 and len({len(s.prompt_ids) for s in samples}) > 1
    saved = policy.sampling
    policy.sampling = replace(saved, temperature=temperature)
    try:
        batch = learner.collate(samples)
        with torch.no_grad():
            fast = learner.token_logps(policy.model, batch)
            for row, s in zip(fast, samples, strict=True):
                n = len(s.completion_ids)
                want = plain_logps(policy.model, s.prompt_ids, s.completion_ids, temperature)
                assert torch.allclose(row[-n:], want, atol=1e-4), (row[-n:], want)
    finally:
        policy.sampling = saved
    assert torch.equal(batch.completion_mask.sum(1), torch.tensor([float(len(s.completion_ids)) for s in samples]))


# --------------------------------------------------------------------------- the update
@dataclass
class Item:
    prompt: tuple[int, ...]
    completion: tuple[int, ...]
    behaviour: tuple[float, ...]
    advantage: float


def advantages(rewards: list[tuple[float, ...]], scale: str) -> list[list[float]]:
    """By hand: reward minus the group mean, over the group's (or the batch's) population std + 1e-4."""
    flat = [r for group in rewards for r in group]
    batch_std = math.sqrt(sum((r - sum(flat) / len(flat)) ** 2 for r in flat) / len(flat))
    out = []
    for group in rewards:
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / len(group)) if scale == "group" else batch_std
        out.append([(r - mean) / (std + 1e-4) for r in group])
    return out


def reference_loss(model: Any, old: Any, items: Sequence[Item], cfg: dict[str, Any], temperature: float) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO/DAPO objective token by token, one sequence at a time."""
    eps_low, eps_high, cap, beta = cfg["epsilon_low"], cfg["epsilon_high"], cfg["is_cap"], cfg["beta"]
    total_tokens = sum(len(i.completion) for i in items)
    loss = torch.zeros(())
    clipped = kl_sum = weight_sum = truncated = 0.0
    for item in items:
        logp = plain_logps(model, item.prompt, item.completion, temperature)
        with torch.no_grad():
            prox = plain_logps(old, item.prompt, item.completion, temperature)  # stored before epoch 1
        terms = []
        for t in range(len(item.completion)):
            ratio = torch.exp(logp[t] - prox[t])
            unclipped = ratio * item.advantage
            bounded = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * item.advantage
            clipped += float(bounded < unclipped)
            raw = math.exp(float(prox[t]) - item.behaviour[t])
            weight = min(raw, cap) if cfg["off_policy"] == "tis" else (raw if raw <= cap else 0.0)
            delta = prox[t] - logp[t]  # the reference model is the policy at the learner's start
            kl = torch.exp(delta) - delta - 1
            terms.append(-torch.minimum(unclipped, bounded) * weight + beta * kl)
            kl_sum, weight_sum, truncated = kl_sum + float(kl) * (beta > 0), weight_sum + raw, truncated + float(raw > cap)
        if cfg["loss_aggregation"] == "token":
            loss = loss + sum(terms) / total_tokens
        else:
            loss = loss + sum(terms) / len(terms) / len(items)
    stats = {"clip_frac": clipped, "kl": kl_sum, "is_weight_mean": weight_sum, "is_truncated_frac": truncated}
    return loss, {k: v / total_tokens for k, v in stats.items()}


CONFIGS = [
    {"num_epochs": 3, "micro_batch_size": 3, "loss_aggregation": "token", "off_policy": "tis", "beta": 0.0,
     "scale_rewards": "group", "learning_rate": 3e-3, "weight_decay": 0.0, "warmup_steps": 0},
    {"num_epochs": 2, "micro_batch_size": 2, "loss_aggregation": "sequence", "off_policy": "decoupled", "beta": 0.1,
     "scale_rewards": "batch", "learning_rate": 3e-3, "weight_decay": 0.1, "warmup_steps": 2, "epsilon_high": 0.1},
    # The plain per-sequence path (left-padded full sequences), which the two above no longer take.
    {"num_epochs": 3, "micro_batch_size": 3, "loss_aggregation": "token", "off_policy": "tis", "beta": 0.0,
     "scale_rewards": "group", "learning_rate": 3e-3, "weight_decay": 0.0, "warmup_steps": 0, "shared_prefix": False},
]  # fmt: skip
REWARDS = [(1.0, 0.0, 0.0, 1.0), (1.0, 1.0, 1.0, 1.0), (0.0, 0.5, 1.0, 2.0)]  # the middle group carries no signal
#: behaviour = the sampler's log-prob minus this, per token (weights e^0, e^.3, e^1 > cap 2).
SHIFTS = (0.0, 0.3, 1.0)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["token-tis-3-epochs", "sequence-decoupled-kl-warmup", "plain-path-token-tis"])
def test_learner_update_equals_a_plain_per_sequence_update(policy: LMPolicy, bodies: list[TokenRollout], cfg: dict[str, Any]) -> None:
    cfg = {"epsilon_low": 0.2, "epsilon_high": 0.28, "is_cap": 2.0, "max_grad_norm": 0.5} | cfg
    temperature = policy.sampling.temperature
    start = copy.deepcopy(policy.model.state_dict())
    old = copy.deepcopy(policy.model).eval()
    learner = GRPOLearner(policy, cfg)
    shifted = [
        TokenRollout(b.task_id, b.input_digest, b.prompt_ids, tuple(
            TokenSample(s.completion_ids, tuple(lp - SHIFTS[(k + t) % 3] for t, lp in enumerate(s.logprobs)), s.finish_reason)
            for k, s in enumerate(b.samples)), b.policy_version, b.tokenizer)
        for b in bodies
    ]  # fmt: skip
    snapshots: list[tuple[dict[str, torch.Tensor], list[torch.Tensor]]] = []
    learner.optimizer.register_step_pre_hook(lambda opt, args, kwargs: snapshots.append(
        ({k: v.detach().clone() for k, v in policy.model.state_dict().items()}, [p.grad.detach().clone() for p in opt.param_groups[0]["params"]])))  # fmt: skip
    try:
        scored = tuple(ScoredRollout(Rollout("me", 0, 0, b), r) for b, r in zip(shifted, REWARDS, strict=True))
        metrics = learner.train(GameState(0, "me"), RoundRewards(0, scored))
        final = [p.detach().clone() for p in policy.model.parameters()]
    finally:
        policy.model.load_state_dict(start)
    items = [Item(b.prompt_ids, s.completion_ids, s.logprobs, a)
             for b, advs in zip(shifted, advantages(REWARDS, cfg["scale_rewards"])) if any(abs(a) > 1e-6 for a in advs)
             for s, a in zip(b.samples, advs)]  # fmt: skip
    assert len(snapshots) == cfg["num_epochs"] == learner.steps and metrics["train/sequences"] == len(items) == 8

    model = copy.deepcopy(old).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["learning_rate"], weight_decay=cfg["weight_decay"])
    totals: dict[str, float] = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "is_weight_mean": 0.0, "is_truncated_frac": 0.0}
    for epoch, (params, grads) in enumerate(snapshots):
        model.load_state_dict(params)
        model.zero_grad()
        loss, stats = reference_loss(model, old, items, cfg, temperature)
        loss.backward()
        want = [p.grad for p in model.parameters()]
        norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in want])))
        want = [g * min(1.0, cfg["max_grad_norm"] / (norm + 1e-6)) for g in want]
        scale = max(float(g.abs().max()) for g in want)
        for got, ref in zip(grads, want, strict=True):
            assert torch.allclose(got, ref, rtol=1e-3, atol=1e-4 * scale), epoch
        if epoch > 0:
            assert stats["clip_frac"] > 0  # ratios moved away from 1 and clipping acts
        for k in totals:
            totals[k] += float(loss) if k == "loss" else stats[k]
        # The optimizer: AdamW with linear warmup, applied to the learner's own gradients.
        for group in optimizer.param_groups:
            group["lr"] = cfg["learning_rate"] * min(1.0, (epoch + 1) / (cfg["warmup_steps"] + 1))
        for p, g in zip(model.parameters(), grads):
            p.grad = g
        optimizer.step()
        after = snapshots[epoch + 1][0] if epoch + 1 < len(snapshots) else dict(zip(dict(model.named_parameters()), final))
        for name, p in model.named_parameters():
            assert torch.allclose(p, after[name], rtol=1e-5, atol=1e-7), (epoch, name)
    assert metrics["train/grad_norm"] == pytest.approx(norm, rel=1e-3)
    top = max(math.exp(float(lp) - b) for i in items for lp, b in zip(plain_logps(old, i.prompt, i.completion, temperature), i.behaviour))
    assert metrics["train/is_weight_max"] == pytest.approx(top, rel=1e-3)
    for k, v in totals.items():
        assert metrics[f"train/{k}"] == pytest.approx(v / cfg["num_epochs"], rel=1e-3, abs=1e-6), k
