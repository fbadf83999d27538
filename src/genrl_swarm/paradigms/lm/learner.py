"""GRPOLearner: GRPO on plain torch for an LMPolicy, with SAPO-style swarm sharing.

Per round: ``num_local`` of this peer's rollouts and ``num_external`` of the swarm's (rewards
recomputed locally), group-normalised advantages, the clipped DAPO surrogate with an
off-policy correction from each token's behaviour log-prob, optional k3 KL to a frozen
reference, several epochs over stored proximal log-probs, gradient accumulation over
micro-batches, clipping, AdamW with linear warmup.

The learner trains on exactly the ids in the bodies: the prompt ids (which ``LMPolicy.check``
compared with this peer's own) followed by each sample's completion ids, nothing re-tokenized,
no EOS appended. The loss mask is each completion's length.

Speed (each a ``GRPOConfig`` switch, measured on/off in benchmarks/bench_grpo_vs_trl.py):
``shared_prefix`` forwards each group's prompt once (lm/prefix.py), ``bucket`` keeps
padding out of micro-batches, ``fused_logprobs`` gathers log-probs without a float32
[tokens, vocab] tensor (lm/logprobs.py), ``precision`` runs matmuls in bf16 over float32
master weights (lm/precision.py). A subclass that overrides ``collate`` (its own mask)
keeps the plain per-sequence path, which is also the reference the tests compare against.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from genrl_swarm.core import GameState, Learner, RoundRewards, ScoredRollout, TokenRollout, Weights
from genrl_swarm.paradigms.lm.grpo_loss import Aggregation, Draws, OffPolicy, Scale, grpo_loss
from genrl_swarm.paradigms.lm.policy import DEFAULT_SYSTEM_PROMPT, LMPolicy
from genrl_swarm.paradigms.lm.precision import Precision, autocast, compute_dtype
from genrl_swarm.paradigms.lm.prefix import Chunk, Chunking, PrefixBatch, SharedPrefixForward, group_by_prompt
from genrl_swarm.paradigms.lm.selection import sapo_select
from genrl_swarm.paradigms.lm.swarm_baseline import advantages
from genrl_swarm.paradigms.lm.swarm_budget import copies_of, edge_copies, eos_inside, path_draws
from genrl_swarm.paradigms.lm.swarm_value import OPENING, at_the_cut, best, gains

__all__ = ["DEFAULT_SYSTEM_PROMPT", "Batch", "GRPOConfig", "GRPOLearner", "Sample"]

#: device -> the lock its in-process peers' updates take turns on (``GRPOLearner.train``).
TURNS: dict[str, threading.Lock] = {}


@dataclass
class GRPOConfig:
    """The ``learner.grpo`` section of a recipe."""

    learning_rate: float = 5e-6
    weight_decay: float = 0.0
    warmup_steps: int = 0
    beta: float = 0.0  # KL weight to the frozen reference; 0 = no reference model kept
    epsilon_low: float = 0.2
    epsilon_high: float = 0.28
    num_epochs: int = 1  # update epochs over one batch; > 1 stores proximal log-probs first
    scale_rewards: Scale = "group"
    loss_aggregation: Aggregation = "token"
    micro_batch_size: int = 8  # sequences per forward/backward (gradients accumulate over the batch)
    max_grad_norm: float = 1.0
    num_local: int = -1  # own rollouts trained on per round (-1 = all)
    num_external: int = 0  # swarm rollouts trained on per round (SAPO)
    max_external_per_sender: int = 0  # cap on one sender's rollouts in one update (0: only the round-robin's fair share)
    off_policy: OffPolicy = "tis"  # correction for rollouts sampled by another policy
    is_cap: float = 2.0  # importance-weight truncation (tis) / masking threshold (decoupled)
    # A swarm token weighs min(1, n * this peer's probability of the path up to it) (``swarm_draws``),
    # the swarm copies of one prefix sharing that budget (``swarm_budget``): bounds a flooder's picks,
    # from any number of ids, with any tails (issue 42). False: 1, as an own token; measured to keep
    # SmolLM2 specialists' sharing gain that the bound per copy took (bench_sharing, 2 seeds: +0.052
    # without, 0.000 with; docs/trust.md).
    swarm_weight_bound: bool = True
    # Speed levers (same gradients up to float rounding; see the module docstring).
    shared_prefix: bool = True  # forward/backward each group's prompt once, not once per completion
    bucket: bool = True  # sort by length into micro-batches with at most max_padding padded positions
    max_padding: float = 0.25
    fused_logprobs: bool = True  # chunked logsumexp + gather, no [tokens, vocab] float32 tensor (shared-prefix path only)
    # float32 | bfloat16 (autocast, float32 master weights) | auto: bf16 when the hardware has it
    # natively *and* the policy samples in bf16. A fp32 sampler keeps the learner in fp32, so
    # on-policy weights pi/mu stay exactly 1; bf16 on both sides still differs a little (the
    # sampler's copy is rounded, autocast rounds per op: mean |d log-prob| ~0.005 on the tiny model).
    precision: Precision = "auto"

    def __post_init__(self) -> None:
        for name, ok, rule in (
            ("learning_rate", self.learning_rate >= 0, ">= 0"),
            ("num_epochs", self.num_epochs >= 1, ">= 1"),
            ("micro_batch_size", self.micro_batch_size >= 1, ">= 1"),
            ("epsilon_low", 0 <= self.epsilon_low < 1, "in [0, 1)"),
            ("epsilon_high", self.epsilon_high >= 0, ">= 0"),
            ("num_local", self.num_local >= -1, ">= -1"),
            ("num_external", self.num_external >= 0, ">= 0"),
            ("max_external_per_sender", self.max_external_per_sender >= 0, ">= 0"),
            ("off_policy", self.off_policy in ("none", "tis", "decoupled"), "none, tis or decoupled"),
            ("is_cap", self.is_cap >= 1, ">= 1"),
            ("scale_rewards", self.scale_rewards in ("group", "batch", "none"), "group, batch or none"),
            ("loss_aggregation", self.loss_aggregation in ("token", "sequence"), "token or sequence"),
            ("max_padding", 0 <= self.max_padding <= 1, "in [0, 1]"),
            ("precision", self.precision in ("auto", "float32", "bfloat16"), "auto, float32 or bfloat16"),
        ):
            if not ok:
                raise ValueError(f"grpo.{name} must be {rule}, got {getattr(self, name)!r}")


@dataclass
class Batch:
    """Left-padded prompt+completion sequences; completions are right-aligned in the last ``width``
    positions, where the masks and per-token tensors live."""

    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    completion_mask: torch.Tensor  # [B, width]
    advantages: torch.Tensor  # [B]
    behaviour_logp: torch.Tensor  # [B, width], 0 where the mask is 0
    prox_logp: torch.Tensor | None = None  # [B, width], stored when num_epochs > 1
    ref_logp: torch.Tensor | None = None
    swarm: torch.Tensor | None = None  # [B], 1 for a row another peer sent (weighted by this peer's policy)
    copies: torch.Tensor | None = None  # [B, width], swarm rows through each token's edge (``swarm_budget``), 1 elsewhere

    @property
    def width(self) -> int:
        return int(self.completion_mask.shape[1])


@dataclass
class Sample:
    """One completion to train on: ids exactly as sampled, behaviour log-probs, advantage."""

    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]
    logprobs: Sequence[float]
    advantage: float
    swarm: bool = field(default=False, kw_only=True)  # another peer sent it: its claims unread, weighted by this peer's policy
    copies: Sequence[int] = field(default=(), kw_only=True)  # per token, the swarm rows sharing its edge (empty: 1 each)


def sampler_dtype(policy: LMPolicy) -> torch.dtype:
    """The precision the policy samples in: its sampling config's ``dtype``/``precision`` if it
    has one, else its weights' dtype."""
    for name in ("dtype", "precision"):
        value = getattr(policy.sampling, name, None)
        if value in ("bfloat16", "bf16", torch.bfloat16):
            return torch.bfloat16
    return next(policy.model.parameters()).dtype


def mark_swarm(samples: Sequence[Sample], chosen: Sequence[ScoredRollout], me: str) -> list[Sample]:
    """``samples`` with ``swarm`` set on those whose completion came in a body another peer sent
    (matched by identity: ``samples`` builds rows from the bodies' own id sequences)."""
    theirs = {id(s.completion_ids) for c in chosen if c.rollout.peer_id != me for s in getattr(c.rollout.body, "samples", ())}
    return [dataclasses.replace(s, swarm=True) if id(s.completion_ids) in theirs else s for s in samples]


def share_edges(samples: Sequence[Sample]) -> list[Sample]:
    """``samples`` with ``copies`` set on the swarm rows: per token, how many swarm rows of this
    update (every sender's) share its prefix and token, so they share one weight budget
    (``swarm_budget``). Rows with no advantage are not counted: they move nothing, and counted
    they would only dilute an honest copy's share (a flooder's zero-reward copies of its prefix)."""
    swarm = [i for i, s in enumerate(samples) if s.swarm and s.advantage != 0.0]
    out = list(samples)
    for i, copies in zip(swarm, edge_copies([(samples[i].prompt_ids, samples[i].completion_ids) for i in swarm])):
        out[i] = dataclasses.replace(samples[i], copies=copies)
    return out


def _loss_units(units: Sequence[Batch | PrefixBatch]) -> list[Batch | Chunk]:
    return [c for u in units for c in (u.chunks if isinstance(u, PrefixBatch) else [u])]


class GRPOLearner(Learner):
    """Trains ``policy``'s module in place; ``weights()`` hands that module back with a new version."""

    def __init__(self, policy: LMPolicy, grpo: GRPOConfig | Mapping[str, Any] | None = None, seed: int = 0) -> None:
        self.cfg = grpo if isinstance(grpo, GRPOConfig) else GRPOConfig(**(grpo or {}))
        self.policy, self.model = policy, policy.model
        self.pad_id = int(policy.tokenizer.pad_token_id)
        self.device = policy.device
        self.rng = random.Random(seed)
        self.reference = copy.deepcopy(self.model).eval().requires_grad_(False) if self.cfg.beta > 0 else None
        self.optimizer = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad], lr=self.cfg.learning_rate, weight_decay=self.cfg.weight_decay
        )
        warmup = max(self.cfg.warmup_steps, 0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: min(1.0, (step + 1) / (warmup + 1)))
        self.steps = 0  # optimizer steps
        self.version = policy.version  # updates; what bodies sampled after the next load report

    # ------------------------------------------------------------------ data
    def select(self, state: GameState, rewards: RoundRewards) -> list[ScoredRollout]:
        """SAPO: ``num_local`` own rollouts and ``num_external`` informative ones from the swarm,
        the most valuable to this peer first (``swarm_value``), senders taking turns among equals
        (``paradigms.lm.selection``). A swarm body with an end-of-sequence id before a completion's
        last token is not one this peer's sampler could draw (it stops there): it is left out
        (``swarm_budget.eos_inside``)."""
        usable = [s for s in rewards.scored if isinstance(s.rollout.body, TokenRollout)]
        own = [s for s in usable if s.rollout.peer_id == state.peer_id]
        eos = self.policy.eos_ids
        swarm = [
            s for s in usable
            if s.rollout.peer_id != state.peer_id and eos_inside((x.completion_ids for x in s.rollout.body.samples), eos) is None
        ]  # fmt: skip
        value = lambda groups: self.swarm_values(groups, own)  # noqa: E731
        return sapo_select(own, swarm, self.cfg.num_local, self.cfg.num_external, self.rng, self.cfg.max_external_per_sender, value=value)

    def swarm_values(self, candidates: Sequence[ScoredRollout], own: Sequence[ScoredRollout]) -> list[tuple[float, float]]:
        """Per competing swarm group, what it can teach this peer (``swarm_value``): the gain of its
        best completion over this peer's own rewards, then this peer's per-token probability of it,
        read only where it can change the draw (``swarm_value.at_the_cut``; 0 elsewhere)."""
        gain = gains(candidates, own)
        cut = at_the_cut(gain, [c.rollout.peer_id for c in candidates], self.cfg.num_external, self.cfg.max_external_per_sender)
        rows = [i for i in cut if candidates[i].rollout.body.samples[best(candidates[i])].completion_ids]
        values = [(g, 0.0) for g in gain]
        for i, close in zip(rows, self.closeness([candidates[i] for i in rows])):
            values[i] = (gain[i], close)
        return values

    @torch.no_grad()
    def closeness(self, groups: Sequence[ScoredRollout]) -> list[float]:
        """Per group, this peer's geometric-mean per-token probability of its best completion's
        opening (``swarm_value.OPENING`` tokens, at the sampling temperature), in micro-batches of
        ``micro_batch_size``; in eval mode (a learner that never samples is left in train mode, where
        dropout would make the value random)."""
        rows = []
        for g in groups:
            body: TokenRollout = g.rollout.body
            ids = body.samples[best(g)].completion_ids[:OPENING]
            rows.append(Sample(body.prompt_ids, ids, (0.0,) * len(ids), 0.0))
        dtype, size, out, training = self.compute_dtype(), self.cfg.micro_batch_size, [], self.model.training
        self.model.eval()
        try:
            for start in range(0, len(rows), size):
                batch = self.collate(rows[start : start + size])
                with autocast(dtype, torch.device(self.device).type):
                    logp = self.token_logps(self.model, batch).float()
                mask = batch.completion_mask
                out += torch.exp((logp * mask).sum(1) / mask.sum(1)).nan_to_num(nan=0.0).tolist()
        finally:
            self.model.train(training)
        return out

    def samples(self, state: GameState, chosen: Sequence[ScoredRollout]) -> list[Sample]:
        """(prompt ids, completion ids, behaviour log-probs, advantage) per completion, exactly
        as in the bodies; groups with no advantage carry no signal and are skipped. A swarm
        group is measured against this peer's own group for the same prompt, its repeats once
        (``swarm_baseline``)."""
        out = []
        for scored, (keep, adv) in zip(chosen, advantages(chosen, state.peer_id, self.cfg.scale_rewards)):
            if torch.all(adv.abs() < 1e-6):
                continue
            body: TokenRollout = scored.rollout.body
            for i, a in zip(keep, adv.tolist()):
                out.append(Sample(body.prompt_ids, body.samples[i].completion_ids, body.samples[i].logprobs, a))
        return out

    def collate(self, samples: Sequence[Sample]) -> Batch:
        width = max(len(s.completion_ids) for s in samples)
        length = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
        ids = torch.full((len(samples), length), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(samples), length), dtype=torch.long)
        comp = torch.zeros((len(samples), width), dtype=torch.float32)
        behaviour = torch.zeros((len(samples), width), dtype=torch.float32)
        copies = torch.ones((len(samples), width), dtype=torch.float32)
        for i, s in enumerate(samples):
            seq, n = [*s.prompt_ids, *s.completion_ids], len(s.completion_ids)
            ids[i, length - len(seq) :], attn[i, length - len(seq) :] = torch.tensor(seq, dtype=torch.long), 1
            comp[i, width - n :], behaviour[i, width - n :] = 1, torch.tensor(s.logprobs, dtype=torch.float32)
            copies[i, width - n :] = copies_of(s)
        adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
        swarm = torch.tensor([float(s.swarm) for s in samples], dtype=torch.float32)
        to = lambda t: t.to(self.device)  # noqa: E731
        return Batch(to(ids), to(attn), to(comp), to(adv), to(behaviour), swarm=to(swarm), copies=to(copies))

    def token_logps(self, model: Any, batch: Batch) -> torch.Tensor:
        """Log-probs of the last ``width`` tokens at the policy's sampling temperature (on-policy,
        they equal the sampler's behaviour log-probs); the LM head runs only over those positions."""
        position_ids = (batch.attention_mask.cumsum(1) - 1).clamp(min=0)
        out = model(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=position_ids,
            logits_to_keep=batch.width + 1, use_cache=False,
        )  # fmt: skip
        logits = out.logits[:, :-1].float() / self.policy.sampling.temperature
        targets = batch.input_ids[:, -batch.width :]
        return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)

    # ------------------------------------------------------------------ training
    def swarm_draws(self, state: GameState) -> float:
        """n in a swarm token's weight min(1, n * this peer's probability of it) (``grpo_loss``):
        the completions this peer draws per prompt, so a token it would draw about once among
        its own weighs what an own one does. Claimed log-probs are unchecked, so a sender could
        otherwise pick, among legal completions, ones this peer would rarely draw and have each
        count as if this peer had sampled it."""
        return float(self.policy.sampling.num_generations)

    def swarm_share(self, draws: float, unit: Batch | Chunk, prox: torch.Tensor) -> Draws:
        """Per token, the n of a swarm token's weight min(1, n * p): ``draws`` times this peer's own
        probability of the prefix before it (``prox``), shared by the copies through its edge, so
        the token weighs min(1, n * P(path) / copies) (``swarm_budget.path_draws``)."""
        return path_draws(draws, prox, unit.completion_mask, unit.copies)

    def compute_dtype(self) -> torch.dtype:
        """The forward/backward matmul precision (parameters and optimiser stay float32)."""
        device_type = torch.device(self.device).type
        if self.cfg.precision != "auto":
            return compute_dtype(self.cfg.precision, device_type)
        return compute_dtype("auto", device_type) if sampler_dtype(self.policy) == torch.bfloat16 else torch.float32

    def uses_shared_prefix(self) -> bool:
        """Shared prompts need the plain sequence layout: a subclass with its own ``collate``
        (AgentLearner's holed masks) keeps the per-sequence path."""
        return self.cfg.shared_prefix and type(self).collate is GRPOLearner.collate and hasattr(self.model, "get_decoder")

    def units(self, samples: Sequence[Sample]) -> list[Batch | PrefixBatch]:
        """What one forward/backward covers: a prompt group (shared prefix) or a micro-batch."""
        size = self.cfg.micro_batch_size
        if self.uses_shared_prefix() and all(s.completion_ids for s in samples):  # the prefix kernels need >= 1 token per row
            return list(group_by_prompt(samples, Chunking(size, self.cfg.bucket, self.cfg.max_padding), self.pad_id, self.device))
        if self.cfg.bucket:
            samples = sorted(samples, key=lambda s: len(s.prompt_ids) + len(s.completion_ids))  # less padding per micro-batch
        return [self.collate(samples[i : i + size]) for i in range(0, len(samples), size)]

    def budget(self, samples: Sequence[Sample]) -> list[Sample]:
        """The swarm rows' shares of their edges' weight budgets (``swarm_budget``)."""
        return share_edges(samples)

    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        """One update (``update``), in turn with the other peers of this process on this device
        (``TURNS``): each update's activations (~0.8 GB for SmolLM2's 16-row micro-batches) would
        otherwise be held at once: adapter peers of the demo's recipe peaked at 5.0 GB with 3 peers,
        2.4 GB with 1. Where the peers' threads fill the cores (2 here) updating at once gains no
        speed; on a machine with more cores than that, each update still runs on its peer's share of
        threads while the others wait (a cost not measured: no such machine here)."""
        with TURNS.setdefault(str(self.device), threading.Lock()):
            return self.update(state, rewards)

    def update(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        chosen = self.select(state, rewards)
        samples = self.budget(mark_swarm(self.samples(state, chosen), chosen, state.peer_id))
        if not samples:
            return {"train/sequences": 0.0}
        units = self.units(samples)
        dtype = self.compute_dtype()
        prefix = SharedPrefixForward(self.policy.sampling.temperature, self.cfg.fused_logprobs, dtype)
        self.model.train()
        self._store_logps(units, prefix, dtype)
        total_tokens = float(sum(float(c.completion_mask.sum()) for c in _loss_units(units)))
        sums = dict.fromkeys(("clip_frac", "kl", "is_weight_mean", "is_truncated_frac", "behaviour_kl"), 0.0)
        acc = {"loss": 0.0, "is_max": 0.0}
        params = [p for p in self.model.parameters() if p.requires_grad]
        draws = self.swarm_draws(state) if self.cfg.swarm_weight_bound else math.inf

        def loss_of(logp: torch.Tensor, unit: Batch | Chunk) -> torch.Tensor:
            # Proximal policy: the weights before this update. With one epoch that is the
            # current forward, detached (no extra pass); later epochs need the stored copy.
            prox = unit.prox_logp if unit.prox_logp is not None else logp.detach()
            loss, s = grpo_loss(
                logp, prox, unit.advantages, unit.completion_mask,
                eps_low=self.cfg.epsilon_low, eps_high=self.cfg.epsilon_high, beta=self.cfg.beta, ref_logp=unit.ref_logp,
                aggregation=self.cfg.loss_aggregation, total_tokens=total_tokens, total_sequences=float(len(samples)),
                behaviour_logp=unit.behaviour_logp, off_policy=self.cfg.off_policy, is_cap=self.cfg.is_cap,
                swarm=unit.swarm, swarm_draws=self.swarm_share(draws, unit, prox),
            )  # fmt: skip
            acc["loss"] += float(loss.detach())
            for k in sums:
                sums[k] += s[k] * s["tokens"]
            acc["is_max"] = max(acc["is_max"], s["is_weight_max"])
            return loss

        grad_norm = 0.0
        for _ in range(self.cfg.num_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            for unit in units:
                if isinstance(unit, PrefixBatch):
                    prefix.backward(self.model, unit, loss_of)
                    continue
                with autocast(dtype, torch.device(self.device).type):
                    logp = self.token_logps(self.model, unit)
                loss_of(logp, unit).backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm))
            self.optimizer.step()
            self.scheduler.step()
            self.steps += 1
        self.version += 1
        seen = total_tokens * self.cfg.num_epochs
        metrics = {k: v / max(seen, 1.0) for k, v in sums.items()}
        metrics |= {"loss": acc["loss"] / self.cfg.num_epochs, "is_weight_max": acc["is_max"], "grad_norm": grad_norm}
        return {f"train/{k}": v for k, v in sorted(metrics.items())} | {"train/sequences": float(len(samples))}

    @torch.no_grad()
    def _store_logps(self, units: Sequence[Batch | PrefixBatch], prefix: SharedPrefixForward, dtype: torch.dtype) -> None:
        """Proximal log-probs only when a batch is reused (epochs > 1); the reference's only when
        beta > 0. With one epoch the detached current log-probs serve, saving a forward pass."""
        models = {"prox_logp": self.model if self.cfg.num_epochs > 1 else None, "ref_logp": self.reference}
        for name, model in models.items():
            if model is None:
                continue
            for unit in units:
                if isinstance(unit, PrefixBatch):
                    for chunk, logp in zip(unit.chunks, prefix.logps(model, unit), strict=True):
                        setattr(chunk, name, logp)
                    continue
                with autocast(dtype, torch.device(self.device).type):
                    setattr(unit, name, self.token_logps(model, unit))

    def weights(self) -> Weights:
        return Weights(self.version, self.model)

    # ------------------------------------------------------------------ checkpoints
    def save(self, directory: Path) -> None:
        """Optimizer, scheduler, counters and RNG; the weights are the policy's to save."""
        directory.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(), "steps": self.steps,
                "version": self.version, "rng": self.rng.getstate(), "torch_rng": torch.get_rng_state(), "config": asdict(self.cfg),
            },
            directory / "learner.pt",
        )  # fmt: skip

    def load(self, directory: Path) -> None:
        extra = torch.load(directory / "learner.pt", weights_only=False)
        self.optimizer.load_state_dict(extra["optimizer"])
        self.scheduler.load_state_dict(extra["scheduler"])
        self.steps, self.version = int(extra["steps"]), int(extra["version"])
        self.rng.setstate(extra["rng"])
        torch.set_rng_state(extra["torch_rng"])
