"""LMPolicy: a Hugging Face causal LM that acts on stage inputs and emits token-level bodies.

The policy owns everything that decides which ids a completion is made of: the model, the
tokenizer, the chat template with its system prompt, and the sampler. A body records exactly
what was sampled (ids, behaviour log-probs, why it ended), so a learner on this peer or any
other trains on those ids and never re-tokenizes text. ``check`` is the receiving side of the
same contract: a peer's body is usable only if it was made with this tokenizer, for the prompt
ids this peer builds itself, within this peer's budget.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from genrl_swarm.core import Body, Policy, RunInterrupted, StageInput, TokenRollout, TokenSample, Weights
from genrl_swarm.lm.models import SMOLLM2, LoraSettings, load_model
from genrl_swarm.lm.sampling import Sampled, hf_sample, sample

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful assistant. Reason briefly, then give only the final answer inside "
    "<answer></answer> tags."
)


@dataclass
class SamplingConfig:
    """How completions are drawn; the ``policy.sampling`` section of a recipe."""

    num_generations: int = 4
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    sampler: Literal["lean", "hf"] = "lean"  # lean: genrl_swarm.lm.sampling; hf: model.generate

    def __post_init__(self) -> None:
        for name, ok, rule in (
            ("num_generations", self.num_generations >= 1, ">= 1"),
            ("max_new_tokens", 1 <= self.max_new_tokens <= 65536, "in [1, 65536]"),
            ("temperature", self.temperature > 0, "> 0"),
            ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
            ("sampler", self.sampler in ("lean", "hf"), "lean or hf"),
        ):
            if not ok:
                raise ValueError(f"sampling.{name} must be {rule}, got {getattr(self, name)!r}")


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short hash of everything that maps text to ids: vocabulary, merges, normalisation,
    special and added tokens, chat template. Two peers with equal fingerprints build the same
    ids from the same text; the backend's padding/truncation state (changed by calls) is left out."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        spec.pop("padding", None)
        spec.pop("truncation", None)
    else:
        spec = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    special = {k: getattr(tokenizer, f"{k}_token_id", None) for k in ("bos", "eos", "pad", "unk")}
    blob = json.dumps([spec, special, getattr(tokenizer, "chat_template", None)], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


class LMPolicy(Policy):
    """Samples ``num_generations`` completions per stage input and reports them as TokenRollouts."""

    body_type = TokenRollout

    def __init__(
        self,
        model: str = SMOLLM2,
        sampling: SamplingConfig | Mapping[str, Any] | None = None,
        lora: LoraSettings | Mapping[str, Any] | None = None,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        device: str = "auto",
        dtype: str = "auto",
        seed: int = 0,
    ) -> None:
        self.sampling = sampling if isinstance(sampling, SamplingConfig) else SamplingConfig(**(sampling or {}))
        lora_cfg = lora if isinstance(lora, LoraSettings) or lora is None else LoraSettings(**lora)
        self.system_prompt = system_prompt
        torch.manual_seed(seed)  # LoRA init and the hf sampler draw from the global RNG
        self.model, self.tokenizer = load_model(model, device, dtype, lora_cfg)
        self.device = next(self.model.parameters()).device
        self.generator = torch.Generator(self.device).manual_seed(seed)  # this peer's sampling stream
        configured = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        extra = configured if isinstance(configured, list) else [configured] if configured is not None else []
        self.eos_ids: list[int] = sorted({self.tokenizer.eos_token_id, *extra})
        self.vocab_size = int(self.model.get_input_embeddings().weight.shape[0])
        self.fingerprint = tokenizer_fingerprint(self.tokenizer)
        self.version = 0
        self._stop = threading.Event()
        self._prompt_cache: dict[str, list[int]] = {}

    # ------------------------------------------------------------------ prompts
    def chat(self, prompt: str) -> str:
        """The text the model sees: the chat template with the system prompt, when there is one."""
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
            messages.append({"role": "user", "content": prompt})
            return str(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
        return f"{self.system_prompt}\n\n{prompt}\n" if self.system_prompt else prompt

    def prompt_ids(self, input: StageInput) -> list[int]:
        """This peer's ids for ``input``: what it samples from and what peers' bodies must carry.
        Cached by digest: ``check`` asks again for every peer's body of the same input."""
        ids = self._prompt_cache.get(input.digest)
        if ids is None:
            if len(self._prompt_cache) > 4096:  # one round's inputs are what matters
                self._prompt_cache.clear()
            ids = self._prompt_cache[input.digest] = list(self.tokenizer(self.chat(input.prompt), add_special_tokens=False)["input_ids"])
        return list(ids)

    # ------------------------------------------------------------------ acting
    def generate(self, prompts: Sequence[Sequence[int]], n: int, greedy: bool = False) -> Sampled:
        """``n`` completions of each prompt (ids) in one batched call, with the configured sampler."""
        cfg = self.sampling
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: completions are appended on the right
            ids[i, width - len(p) :], mask[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long), 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        self.model.eval()
        if cfg.sampler == "lean":
            return sample(self.model, ids, mask, n, cfg.max_new_tokens, self.eos_ids, cfg.temperature, cfg.top_p,
                          greedy, self.generator, self._stop.is_set)  # fmt: skip
        return hf_sample(self.model, ids, mask, n, cfg.max_new_tokens, self.eos_ids, self.tokenizer.pad_token_id,
                         cfg.temperature, cfg.top_p, greedy, self._stop.is_set)  # fmt: skip

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        """One TokenRollout per input (the stage is in each input's prompt and digest)."""
        return [*self.rollouts(inputs, greedy)]

    def rollouts(self, inputs: Sequence[StageInput], greedy: bool = False) -> list[TokenRollout]:
        """``act``, typed: ``num_generations`` samples per input (one when ``greedy``).

        Raises RunInterrupted when ``interrupt`` was called before or during sampling (the
        request is consumed, so a reused policy acts normally afterwards)."""
        try:
            if self._stop.is_set():
                raise RunInterrupted("interrupted before acting")
            if not inputs:
                return []
            prompts = [self.prompt_ids(i) for i in inputs]
            n = 1 if greedy else self.sampling.num_generations
            rows = self.generate(prompts, n, greedy).rows()
        except RunInterrupted:
            self._stop.clear()
            raise
        return [
            TokenRollout(
                task_id=inp.task_id,
                input_digest=inp.digest,
                prompt_ids=tuple(prompt),
                samples=tuple(TokenSample(tuple(ids), tuple(lps), "stop" if stopped else "length") for ids, lps, stopped in rows[k * n : (k + 1) * n]),
                policy_version=self.version,
                tokenizer=self.fingerprint,
            )
            for k, (inp, prompt) in enumerate(zip(inputs, prompts))
        ]

    def interrupt(self) -> None:
        """Make a running (or the next) ``act`` raise RunInterrupted; the sampler polls the flag
        between tokens, so a peer stops within one decoding step."""
        self._stop.set()

    # ------------------------------------------------------------------ receiving
    def texts(self, body: Body) -> tuple[str, ...]:
        if not isinstance(body, TokenRollout):
            return ()
        return tuple(self.tokenizer.batch_decode([list(s.completion_ids) for s in body.samples], skip_special_tokens=True))

    def check(self, body: Body, input: StageInput) -> str | None:
        """Why this peer cannot train on ``body`` as an answer to its own ``input``, or None."""
        if not isinstance(body, TokenRollout):
            return f"a {type(body).__name__} body, this policy takes TokenRollout"
        if body.tokenizer != self.fingerprint:
            return f"tokenizer fingerprint {body.tokenizer} differs from this peer's {self.fingerprint}"
        own = self.prompt_ids(input)
        if list(body.prompt_ids) != own:
            return f"prompt_ids differ from the {len(own)} ids this peer builds for task {input.task_id}"
        if len(body.samples) > self.sampling.num_generations:  # a budget: more samples, more scoring and training
            return f"{len(body.samples)} samples, more than this peer's num_generations {self.sampling.num_generations}"
        limit = self.sampling.max_new_tokens
        for k, s in enumerate(body.samples):
            if not s.completion_ids:
                return f"sample {k} is an empty completion"
            if len(s.completion_ids) > limit:
                return f"sample {k} has {len(s.completion_ids)} tokens, more than this peer's max_new_tokens {limit}"
        top = max(max(body.prompt_ids, default=0), max(max(s.completion_ids) for s in body.samples))
        if top >= self.vocab_size:
            return f"token id {top} is outside this peer's vocabulary of {self.vocab_size}"
        return None

    # ------------------------------------------------------------------ weights
    def load_weights(self, weights: Weights) -> None:
        """Act with ``weights`` from now on. In one process the learner hands over the module it
        trains, which is this policy's own: nothing to copy. Otherwise a module or a state dict."""
        state = weights.state
        if state is not self.model:
            self.model.load_state_dict(state.state_dict() if isinstance(state, torch.nn.Module) else state)
        self.version = weights.version

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(directory / "model")
        self.tokenizer.save_pretrained(directory / "model")
        torch.save({"version": self.version, "sampling_rng": self.generator.get_state()}, directory / "policy.pt")

    def load(self, directory: Path) -> None:
        if hasattr(self.model, "peft_config"):
            from peft import set_peft_model_state_dict
            from peft.utils import load_peft_weights

            set_peft_model_state_dict(self.model, load_peft_weights(str(directory / "model")))
        else:
            from transformers import AutoModelForCausalLM

            saved = AutoModelForCausalLM.from_pretrained(str(directory / "model"), dtype=next(self.model.parameters()).dtype)
            self.model.load_state_dict(saved.state_dict())
        extra = torch.load(directory / "policy.pt", weights_only=False)
        self.version = int(extra["version"])
        self.generator.set_state(extra["sampling_rng"])
