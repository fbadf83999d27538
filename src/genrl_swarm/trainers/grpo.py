"""GRPO for Hugging Face causal LMs, on plain torch, with SAPO-style swarm sharing.

Generation: every prompt x ``num_generations`` in one ``generate`` call (left padding, stop at
EOS). Training: per round, ``num_local`` of this peer's rollouts and ``num_external`` of the
swarm's (rewards recomputed locally), group-normalised advantages, the clipped DAPO surrogate,
optional k3 KL to a frozen reference, several epochs over stored old log-probs, gradient
accumulation over micro-batches, clipping, AdamW with linear warmup.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from genrl_swarm.core import GameState, RewardManager, Rollout, RoundRewards, ScoredRollout, Task, Trainer
from genrl_swarm.lm.models import SMOLLM2, LoraSettings, load_model
from genrl_swarm.lm.sampling import sample
from genrl_swarm.trainers.grpo_loss import Aggregation, Scale, group_advantages, grpo_loss

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful assistant. Reason briefly, then give only the final answer inside "
    "<answer></answer> tags."
)


@dataclass
class GRPOConfig:
    num_generations: int = 4
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    learning_rate: float = 5e-6
    weight_decay: float = 0.0
    warmup_steps: int = 0
    beta: float = 0.0  # KL weight to the frozen reference; 0 = no reference model kept
    epsilon_low: float = 0.2
    epsilon_high: float = 0.28
    num_epochs: int = 1  # update epochs over one batch; > 1 reuses stored old log-probs
    scale_rewards: Scale = "group"
    loss_aggregation: Aggregation = "token"
    micro_batch_size: int = 8  # sequences per forward/backward (gradients accumulate over the batch)
    max_grad_norm: float = 1.0
    num_local: int = -1  # own rollouts trained on per round (-1 = all)
    num_external: int = 0  # swarm rollouts trained on per round (SAPO)
    update_policy: bool = True  # false: generate and share, never train
    sampler: Literal["lean", "hf"] = "lean"  # lean: genrl_swarm.lm.sampling; hf: model.generate


@dataclass
class Batch:
    """Left-padded prompt+completion sequences with completion masks over the last ``width`` tokens."""

    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    completion_mask: torch.Tensor  # [B, width]
    advantages: torch.Tensor  # [B]
    old_logp: torch.Tensor | None = None  # [B, width]
    ref_logp: torch.Tensor | None = None

    @property
    def width(self) -> int:
        return int(self.completion_mask.shape[1])


@dataclass
class _Sample:
    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float


@dataclass
class GRPOTrainer(Trainer):
    model: str = SMOLLM2
    grpo: GRPOConfig | Mapping[str, Any] = field(default_factory=GRPOConfig)
    lora: LoraSettings | Mapping[str, Any] | None = None
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    device: str = "auto"
    dtype: str = "auto"
    seed: int = 0

    def __post_init__(self) -> None:
        self.cfg = self.grpo if isinstance(self.grpo, GRPOConfig) else GRPOConfig(**self.grpo)
        lora = self.lora if isinstance(self.lora, LoraSettings) or self.lora is None else LoraSettings(**self.lora)
        self.rng = random.Random(self.seed)
        torch.manual_seed(self.seed)
        self.policy, self.tokenizer = load_model(self.model, self.device, self.dtype, lora)
        self._device = next(self.policy.parameters()).device
        self.generator = torch.Generator(self._device).manual_seed(self.seed)  # this peer's sampling stream
        configured = getattr(getattr(self.policy, "generation_config", None), "eos_token_id", None)
        extra = configured if isinstance(configured, list) else [configured] if configured is not None else []
        self.eos_ids = sorted({self.tokenizer.eos_token_id, *extra})
        self.reference = None
        if self.cfg.beta > 0:
            self.reference = copy.deepcopy(self.policy).eval().requires_grad_(False)
        self.optimizer = torch.optim.AdamW(
            [p for p in self.policy.parameters() if p.requires_grad],
            lr=self.cfg.learning_rate,
            weight_decay=self.cfg.weight_decay,
        )
        warmup = max(self.cfg.warmup_steps, 0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: min(1.0, (step + 1) / (warmup + 1)))
        self.steps = 0

    # ------------------------------------------------------------------ generation
    def chat(self, prompt: str) -> str:
        """The text the model sees: the chat template when the tokenizer has one."""
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
            messages.append({"role": "user", "content": prompt})
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            return str(text)
        return f"{self.system_prompt}\n\n{prompt}\n" if self.system_prompt else prompt

    @torch.no_grad()
    def generate_ids(self, prompts: Sequence[str], n: int, greedy: bool = False) -> torch.Tensor:
        """Completion token ids [len(prompts) * n, T <= max_new_tokens] from one batched call
        (all prompts x n); rows that hit EOS are padded after it."""
        enc = self.tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False).to(self._device)
        if self.cfg.sampler == "lean":
            return sample(
                self.policy, enc["input_ids"], enc["attention_mask"], n, self.cfg.max_new_tokens, self.eos_ids,
                self.tokenizer.pad_token_id, self.cfg.temperature, self.cfg.top_p, greedy, self.generator,
            )  # fmt: skip
        sampling = {} if greedy else {"temperature": self.cfg.temperature, "top_p": self.cfg.top_p}
        out = self.policy.generate(
            **enc,
            max_new_tokens=self.cfg.max_new_tokens,
            num_return_sequences=n,
            do_sample=not greedy,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.eos_ids,
            **sampling,
        )
        return out[:, enc["input_ids"].shape[1] :]

    def _sample(self, prompts: Sequence[str], n: int, greedy: bool = False) -> list[list[str]]:
        texts = self.tokenizer.batch_decode(self.generate_ids(prompts, n, greedy), skip_special_tokens=True)
        return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]

    def generate(self, tasks: Sequence[Task], stage: int) -> list[list[str]]:
        if not tasks:
            return []
        self.policy.eval()
        return self._sample([self.chat(t.prompt) for t in tasks], self.cfg.num_generations)

    def evaluate(self, tasks: Sequence[Task], reward: RewardManager) -> dict[str, float]:
        """Greedy accuracy on held-out tasks (one completion each)."""
        if not tasks:
            return {}
        self.policy.eval()
        outputs = self._sample([self.chat(t.prompt) for t in tasks], 1, greedy=True)
        scores = [reward.score(t, Rollout("eval", 0, 0, t.id, t.prompt, tuple(o)))[0] for t, o in zip(tasks, outputs)]
        return {"eval/reward": sum(scores) / len(scores)}

    # ------------------------------------------------------------------ training
    def select(self, state: GameState, rewards: RoundRewards) -> list[ScoredRollout]:
        """SAPO: ``num_local`` own rollouts and ``num_external`` sampled from the swarm's."""
        own = [s for s in rewards.scored if s.rollout.peer_id == state.peer_id]
        swarm = [s for s in rewards.scored if s.rollout.peer_id != state.peer_id]
        if 0 <= self.cfg.num_local < len(own):
            own = self.rng.sample(own, self.cfg.num_local)
        external = self.rng.sample(swarm, min(self.cfg.num_external, len(swarm)))
        return own + external

    def _samples(self, chosen: Sequence[ScoredRollout]) -> list[_Sample]:
        """Tokenised (prompt, completion, advantage) triples; zero-advantage groups are skipped."""
        rewards = [torch.tensor(s.rewards, dtype=torch.float32) for s in chosen]
        samples = []
        for scored, adv in zip(chosen, group_advantages(rewards, self.cfg.scale_rewards)):
            if torch.all(adv.abs() < 1e-6):
                continue  # the whole group scored the same: no learning signal
            prompt_ids = self.tokenizer(self.chat(scored.rollout.prompt), add_special_tokens=False)["input_ids"]
            for completion, a in zip(scored.rollout.completions, adv.tolist()):
                ids = self.tokenizer(completion, add_special_tokens=False)["input_ids"][: self.cfg.max_new_tokens]
                if len(ids) < self.cfg.max_new_tokens:
                    ids = ids + [self.tokenizer.eos_token_id]  # a finished answer ends with EOS
                samples.append(_Sample(prompt_ids, ids, a))
        return samples

    def collate(self, samples: Sequence[_Sample]) -> Batch:
        width = max(len(s.completion_ids) for s in samples)
        length = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(samples), length), pad, dtype=torch.long)
        attn = torch.zeros((len(samples), length), dtype=torch.long)
        comp = torch.zeros((len(samples), width), dtype=torch.float32)
        for i, s in enumerate(samples):
            seq = s.prompt_ids + s.completion_ids
            ids[i, length - len(seq) :] = torch.tensor(seq)
            attn[i, length - len(seq) :] = 1
            comp[i, width - len(s.completion_ids) :] = 1
        adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
        return Batch(ids.to(self._device), attn.to(self._device), comp.to(self._device), adv.to(self._device))

    def token_logps(self, model: Any, batch: Batch) -> torch.Tensor:
        """Log-probs of the last ``width`` tokens; the LM head runs only over those positions."""
        position_ids = (batch.attention_mask.cumsum(1) - 1).clamp(min=0)
        out = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=position_ids,
            logits_to_keep=batch.width + 1,
            use_cache=False,
        )
        logits = out.logits[:, :-1].float() / self.cfg.temperature
        targets = batch.input_ids[:, -batch.width :]
        picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return picked - torch.logsumexp(logits, dim=-1)

    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        if not self.cfg.update_policy:
            return {}
        samples = self._samples(self.select(state, rewards))
        if not samples:
            return {"train/sequences": 0.0}
        samples.sort(key=lambda s: len(s.prompt_ids) + len(s.completion_ids))  # less padding per micro-batch
        size = self.cfg.micro_batch_size
        batches = [self.collate(samples[i : i + size]) for i in range(0, len(samples), size)]
        self.policy.train()
        self._store_old_logps(batches)
        totals = {"token": float(sum(b.completion_mask.sum() for b in batches)), "sequence": float(len(samples))}
        stats = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "grad_norm": 0.0}
        for _ in range(self.cfg.num_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            for batch in batches:
                logp = self.token_logps(self.policy, batch)
                old = batch.old_logp if batch.old_logp is not None else logp.detach()
                loss, s = grpo_loss(
                    logp, old, batch.advantages, batch.completion_mask,
                    self.cfg.epsilon_low, self.cfg.epsilon_high, self.cfg.beta, batch.ref_logp,
                    self.cfg.loss_aggregation, totals["token"], totals["sequence"],
                )  # fmt: skip
                loss.backward()
                share = len(batch.advantages) / len(samples)
                stats["loss"] += float(loss.detach()) / self.cfg.num_epochs
                stats["clip_frac"] += s["clip_frac"] * share / self.cfg.num_epochs
                stats["kl"] += s["kl"] * share / self.cfg.num_epochs
            params = [p for p in self.policy.parameters() if p.requires_grad]
            stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm))
            self.optimizer.step()
            self.scheduler.step()
            self.steps += 1
        return {f"train/{k}": v for k, v in stats.items()} | {"train/sequences": float(len(samples))}

    @torch.no_grad()
    def _store_old_logps(self, batches: Sequence[Batch]) -> None:
        """Old log-probs are needed only when a batch is reused (epochs > 1); the reference's
        only when beta > 0. With one epoch the ratio is 1 and the detached current log-probs
        serve, saving a forward pass."""
        for batch in batches:
            if self.cfg.num_epochs > 1:
                batch.old_logp = self.token_logps(self.policy, batch)
            if self.reference is not None:
                batch.ref_logp = self.token_logps(self.reference, batch)

    # ------------------------------------------------------------------ checkpoints
    def save(self, directory: Path) -> None:
        self.policy.save_pretrained(directory / "model")
        self.tokenizer.save_pretrained(directory / "model")
        torch.save(
            {
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "steps": self.steps,
                "rng": self.rng.getstate(),
                "torch_rng": torch.get_rng_state(),
                "sampling_rng": self.generator.get_state(),
                "config": asdict(self.cfg),
            },
            directory / "trainer.pt",
        )

    def load(self, directory: Path) -> None:
        from transformers import AutoModelForCausalLM

        if hasattr(self.policy, "peft_config"):
            from peft import set_peft_model_state_dict
            from peft.utils import load_peft_weights

            set_peft_model_state_dict(self.policy, load_peft_weights(str(directory / "model")))
        else:
            saved = AutoModelForCausalLM.from_pretrained(str(directory / "model"), dtype=next(self.policy.parameters()).dtype)
            self.policy.load_state_dict(saved.state_dict())
        extra = torch.load(directory / "trainer.pt", weights_only=False)
        self.optimizer.load_state_dict(extra["optimizer"])
        self.scheduler.load_state_dict(extra["scheduler"])
        self.steps = extra["steps"]
        self.rng.setstate(extra["rng"])
        torch.set_rng_state(extra["torch_rng"])
        self.generator.set_state(extra["sampling_rng"])
