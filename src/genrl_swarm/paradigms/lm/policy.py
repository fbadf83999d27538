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
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from genrl_swarm.core import ActSeed, Body, Policy, Refusal, RunInterrupted, StageInput, TokenRollout, TokenSample, Weights
from genrl_swarm.core.interfaces import MAX_MODEL_BYTES, WorkCheck
from genrl_swarm.core.limits import LimitError
from genrl_swarm.paradigms.lm import heap
from genrl_swarm.paradigms.lm.adapters import LayerTerms, adapt, terms
from genrl_swarm.paradigms.lm.answers import DEFAULT_SYSTEM_PROMPT
from genrl_swarm.paradigms.lm.decoder import Decoder, supports
from genrl_swarm.paradigms.lm.model_digest import ModelDigest, adapter_bytes, adapter_slots, load_adapter, model_digest
from genrl_swarm.paradigms.lm.models import SMOLLM2, LoraSettings, apply_lora, check_model, load_peer_model, pick_device
from genrl_swarm.paradigms.lm.packed import PackCache
from genrl_swarm.paradigms.lm.precision import inexact_fp32
from genrl_swarm.paradigms.lm.sampling import Sampled, hf_sample, sample
from genrl_swarm.paradigms.lm.sampling_model import DTYPES, SamplingModel
from genrl_swarm.paradigms.lm.seeding import Uniforms
from genrl_swarm.paradigms.lm.static_sampling import StepFn, sample_static
from genrl_swarm.paradigms.lm.verify import check_bodies

log = logging.getLogger(__name__)

#: The smallest committed top_p a receiver checks. Below about ``lm.verify.Tolerance.mass`` the
#: top token's own edge is within the tolerance of top_p, every token a near tie, and a check that
#: skips near ties would pass any tokens; 0.01 leaves a wide margin and no honest recipe near it.
MIN_TOP_P = 0.01


@dataclass
class SamplingConfig:
    """How completions are drawn; the ``policy.sampling`` section of a recipe."""

    num_generations: int = 4
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    #: lean: genrl_swarm.paradigms.lm.sampling, seeded (lm.seeding); hf: model.generate, drawing from
    #: torch's global RNG (its tokens cannot be re-derived by a receiver)
    sampler: Literal["lean", "hf"] = "lean"
    #: The precision the sampler runs in. bfloat16 samples from a bf16 copy of the model, refreshed
    #: whenever the (fp32) weights change; behaviour log-probs are then bf16's, and the learner's
    #: off-policy correction absorbs the difference to its fp32 log-probs.
    dtype: Literal["float32", "bfloat16"] = "float32"
    #: lean sampler only. static: keys/values in one preallocated buffer (lm.decoder; Llama and
    #: Qwen2 models, others fall back to dynamic); dynamic: the model's forward with a growing
    #: DynamicCache. static is the default: faster in every case measured (fp32 on an AMD EPYC,
    #: 2026-11-27: SmolLM2 1.19-1.31x, the tiny test model 1.9x; bf16 1.4x on the AMX Xeon), and
    #: its log-probs are checked against fresh forwards as the dynamic path's are.
    kv_cache: Literal["static", "dynamic"] = "static"
    #: static kv only: torch.compile the decode step. Measured not to pay on this CPU (tiny model,
    #: 2026-11-22: ~9 min of compiling under load, recompiles per column, then 3x slower than eager).
    compile: bool = False
    #: static kv on a CPU (fp32, or bf16 where oneDNN has bf16 kernels; models at least
    #: lm.packed.MIN_WIDTH wide): the prefill's and decode steps' weights fused (q/k/v, gate/up) and packed for
    #: oneDNN once per set of weights (a bf16 step 1.23x faster on an AMX Xeon, SmolLM2's fp32
    #: sampling 1.13-1.27x on an AMD EPYC). False calls the model's modules. Ignored with
    #: ``compile`` (a compiled step is bound to the decoder it was traced from, whose packing
    #: would go stale).
    pack: bool = True
    #: torch threads while sampling (0: leave torch's setting). Decode multiplies small matrices
    #: (rows x hidden); on a CPU shared with other busy processes, two spinning OpenMP threads can
    #: run 5-10x slower than one, so a shared machine may want 1. Restored after each call.
    threads: int = 0

    def __post_init__(self) -> None:
        for name, ok, rule in (
            ("num_generations", self.num_generations >= 1, ">= 1"),
            ("max_new_tokens", 1 <= self.max_new_tokens <= 65536, "in [1, 65536]"),
            ("temperature", self.temperature > 0, "> 0"),
            ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
            ("sampler", self.sampler in ("lean", "hf"), "lean or hf"),
            ("dtype", self.dtype in DTYPES, " or ".join(DTYPES)),
            ("kv_cache", self.kv_cache in ("static", "dynamic"), "static or dynamic"),
            ("threads", self.threads >= 0, ">= 0"),
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

    body_type: type[Body] = TokenRollout

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
        self.lora = lora_cfg  # what a replica elsewhere is built with (async_grpo's workers and learner)
        torch.manual_seed(seed)  # LoRA init and the hf sampler draw from the global RNG
        loaded = load_peer_model(model, device, dtype, lora_cfg)
        self.model, self.tokenizer = loaded.model, loaded.tokenizer
        self.base = loaded.base  # the frozen base this peer's adapters share with the process's other peers
        self.device = next(self.model.parameters()).device
        if self.device.type == "cpu":
            heap.keep_freed_memory()  # a decode step's big temporaries reuse their pages (lm.heap)
        self.seed = seed
        #: What this round's draws are seeded with (``begin_round``); None outside a game.
        self.act_seed: ActSeed | None = None
        self.draws = 0  # sampling calls without an ActSeed: each gets keys of its own (``local_seed``)
        configured = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        extra = configured if isinstance(configured, list) else [configured] if configured is not None else []
        self.eos_ids: list[int] = sorted({self.tokenizer.eos_token_id, *extra})
        self.vocab_size = int(self.model.get_input_embeddings().weight.shape[0])
        self.fingerprint = tokenizer_fingerprint(self.tokenizer)
        self.version = 0
        self._stop = threading.Event()
        self._prompt_cache: dict[str, list[int]] = {}
        self._sampling_models: dict[str, SamplingModel] = {}
        self._compiled: tuple[Any, StepFn] | None = None  # (module, its compiled decode step)
        self._packs = self.base.packs if self.base is not None else PackCache()  # the decode weights packed for oneDNN
        self._scratch: Any = None  # a shell of the shared base for other peers' adapters (``sender_model``)
        self._inexact: str | None = None  # why a draw this round was not exact fp32 (``committed_model``)
        self._told: str | None = None  # the last such reason logged
        self._scratch_slots: dict[str, torch.Tensor] | None = None  # its adapter's tensors, written in place
        self._scratch_terms: tuple[LayerTerms, ...] | None = None  # its LoRA terms (lm.adapters.terms), read from those tensors

    @classmethod
    def preflight(cls, arguments: Mapping[str, Any], peers_here: int = 1) -> None:
        """Fail before any peer loads when ``model`` cannot load (``run/preflight.py``). On a CPU,
        set the process's heap (``lm.heap``) here, before any peer's thread allocates: glibc gives a
        thread its heap at its first allocation, and one heap for ``peers_here`` > 1 in-process
        peers is set only before."""
        if pick_device(str(arguments.get("device", "auto"))).type == "cpu":
            heap.keep_freed_memory(one_heap=peers_here > 1)
        check_model(str(arguments.get("model", SMOLLM2)))

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
    def begin_round(self, seed: ActSeed) -> None:
        """This round's samples draw with keys from ``seed`` (``lm.seeding``)."""
        self.act_seed = seed
        self._inexact = None

    def local_seed(self) -> ActSeed:
        """Keys for a sampling call outside a game's round (tests, benchmarks, warm-ups): a fresh
        site per call, from this policy's seed and how many such calls came before."""
        self.draws += 1
        return ActSeed(b"local:%d" % self.seed, self.draws, "")

    def generate(self, prompts: Sequence[Sequence[int]], n: int, greedy: bool = False, uniforms: Uniforms | None = None) -> Sampled:
        """``n`` completions of each prompt (ids) in one batched call, with the configured sampler.
        ``uniforms``: each row's key (``lm.seeding``); by default fresh ones (``local_seed``)."""
        cfg = self.sampling
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: completions are appended on the right
            ids[i, width - len(p) :], mask[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long), 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        self.model.eval()
        saved = torch.get_num_threads()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        if uniforms is None and not greedy:
            uniforms = Uniforms.of(self.local_seed(), [str(i) for i in range(len(prompts))], n)
        try:
            return self._generate(ids, mask, n, greedy, uniforms)
        finally:
            torch.set_num_threads(saved)

    def _generate(self, ids: torch.Tensor, mask: torch.Tensor, n: int, greedy: bool, uniforms: Uniforms | None) -> Sampled:
        cfg = self.sampling
        model = self.sampling_model()
        self._inexact = self._inexact or inexact_fp32(self.device, next(model.parameters()).dtype)  # at draw time: flags can change
        if cfg.sampler == "hf":
            return hf_sample(model, ids, mask, n, cfg.max_new_tokens, self.eos_ids, self.tokenizer.pad_token_id,
                             cfg.temperature, cfg.top_p, greedy, self._stop.is_set)  # fmt: skip
        if cfg.kv_cache == "static" and supports(model):
            decoder = Decoder(model)
            if cfg.pack and not cfg.compile:  # a compiled step keeps the decoder it was made from
                packed = self._packs.get(decoder)  # the base's: LoRA terms are added per call (lm.adapters)
                decoder.packed = adapt(packed, decoder.layers, decoder.head) if packed is not None else None
            return sample_static(decoder, ids, mask, n, cfg.max_new_tokens, self.eos_ids, cfg.temperature, cfg.top_p,
                                 greedy, uniforms, self._stop.is_set, step_fn=self._step_fn(model, decoder))  # fmt: skip
        return sample(model, ids, mask, n, cfg.max_new_tokens, self.eos_ids, cfg.temperature, cfg.top_p,
                      greedy, uniforms, self._stop.is_set)  # fmt: skip

    def sampling_model(self) -> Any:
        """The module that samples: ``self.model`` itself, or its copy in ``sampling.dtype`` (made
        current with this policy's weights on every call, see lm.sampling_model)."""
        dtype = self.sampling.dtype
        if dtype not in self._sampling_models:
            self._sampling_models = {dtype: SamplingModel(dtype)}  # one copy at a time
        return self._sampling_models[dtype].get(self.model)

    def _step_fn(self, model: Any, decoder: Decoder) -> StepFn | None:
        """The compiled decode step when ``sampling.compile`` (compiled once per module)."""
        if not self.sampling.compile:
            return None
        if self._compiled is None or self._compiled[0] is not model:
            self._compiled = (model, torch.compile(decoder.step, dynamic=True))
        return self._compiled[1]

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        """One TokenRollout per input (the stage is in each input's prompt and digest)."""
        return [*self.rollouts(inputs, greedy)]

    def rollouts(self, inputs: Sequence[StageInput], greedy: bool = False) -> list[TokenRollout]:
        """``act``, typed: ``num_generations`` samples per input (one when ``greedy``). Sample k
        of the body for input i draws with the key of (this round's ``ActSeed``, i's digest, k),
        so its tokens are a function of the model and that key alone (``lm.seeding``).

        Raises RunInterrupted when ``interrupt`` was called before or during sampling (the
        request is consumed, so a reused policy acts normally afterwards)."""
        try:
            if self._stop.is_set():
                raise RunInterrupted("interrupted before acting")
            if not inputs:
                return []
            prompts = [self.prompt_ids(i) for i in inputs]
            self.check_context(inputs, prompts)
            n = 1 if greedy else self.sampling.num_generations
            keys = None if greedy else Uniforms.of(self.act_seed or self.local_seed(), [i.digest for i in inputs], n)
            rows = self.generate(prompts, n, greedy, keys).rows()
        except RunInterrupted:
            self._stop.clear()
            raise
        return [
            TokenRollout(
                task_id=inp.task_id,
                input_digest=inp.digest,
                prompt_ids=tuple(prompt),
                samples=tuple(
                    TokenSample(tuple(ids), tuple(lps), "stop" if stopped else "length") for ids, lps, stopped in rows[k * n : (k + 1) * n]
                ),
                policy_version=self.version,
                tokenizer=self.fingerprint,
            )
            for k, (inp, prompt) in enumerate(zip(inputs, prompts))
        ]

    def check_context(self, inputs: Sequence[StageInput], prompts: Sequence[Sequence[int]]) -> None:
        """Raise LimitError when a prompt and ``sampling.max_new_tokens`` pass the model's context
        (``max_position_embeddings``): positions past it are not ones the model was trained on."""
        context = getattr(self.model.config, "max_position_embeddings", None)
        wanted = self.sampling.max_new_tokens
        for inp, ids in zip(inputs, prompts):
            if isinstance(context, int) and len(ids) + wanted > context:
                fix = (
                    f"lower it to at most {context - len(ids)}" if len(ids) < context else "shorten the prompts (the data's, or policy.system_prompt)"
                )
                raise LimitError(
                    f"policy.sampling.max_new_tokens={wanted} does not fit: the prompt of task {inp.task_id} takes {len(ids)} tokens "
                    f"and the model reads at most {context} (max_position_embeddings); {fix}"
                )

    def interrupt(self) -> None:
        """Make a running (or the next) ``act`` raise RunInterrupted; the sampler polls the flag
        between tokens, so a peer stops within one decoding step."""
        self._stop.set()

    # ------------------------------------------------------------------ receiving
    def texts(self, body: Body) -> tuple[str, ...]:
        if not isinstance(body, TokenRollout):
            return ()
        return tuple(self.tokenizer.batch_decode([list(s.completion_ids) for s in body.samples], skip_special_tokens=True))

    def check(self, body: Body, input: StageInput) -> str | Refusal | None:
        """Why this peer cannot train on ``body`` as an answer to its own ``input``, or None.
        Verdicts that follow from this peer's own model and settings (tokenizer, prompt ids,
        vocabulary, num_generations, max_new_tokens) are ``local``: never held against the sender."""
        if not isinstance(body, TokenRollout):
            return f"a {type(body).__name__} body, this policy takes TokenRollout"
        if body.tokenizer != self.fingerprint:
            return Refusal(f"tokenizer fingerprint {body.tokenizer} differs from this peer's {self.fingerprint}", local=True)
        own = self.prompt_ids(input)
        if list(body.prompt_ids) != own:
            return Refusal(f"prompt_ids differ from the {len(own)} ids this peer builds for task {input.task_id}", local=True)
        if len(body.samples) > self.sampling.num_generations:  # a budget: more samples, more scoring and training
            return Refusal(f"{len(body.samples)} samples, more than this peer's num_generations {self.sampling.num_generations}", local=True)
        limit, eos = self.sampling.max_new_tokens, self.tokenizer.eos_token_id
        for k, s in enumerate(body.samples):
            if not s.completion_ids:
                return f"sample {k} is an empty completion"
            if eos is not None and eos in s.completion_ids[:-1]:  # every sampler stops there; the fingerprint fixes the id
                return f"sample {k} goes on past the tokenizer's EOS, where every sampler stops"
            if len(s.completion_ids) > limit:
                return Refusal(f"sample {k} has {len(s.completion_ids)} tokens, more than this peer's max_new_tokens {limit}", local=True)
        top = max(max(body.prompt_ids, default=0), max(max(s.completion_ids) for s in body.samples))
        if top >= self.vocab_size:
            return Refusal(f"token id {top} is outside this peer's vocabulary of {self.vocab_size}", local=True)
        return None

    # ------------------------------------------------------------------ the model, committed
    def model_digest(self) -> ModelDigest:
        """The digests of the base and the adapter this peer generates with (``lm.model_digest``):
        what its commitment names. The shared base's is hashed once; a full model's every call."""
        return model_digest(self.model, self.base.digest() if self.base is not None else None)

    def committed_model(self) -> tuple[str, bytes] | None:
        """What this peer's commitments name (``core.spot_checks``): ``lm1:<base>:<adapter>:<scaling>:<temperature>:<top_p>``
        and the adapter's safetensors bytes (``scaling``: LoRA's alpha / r, which the tensors do not
        carry). Only an adapter peer on a shared base sampling with the lean, seeded sampler in exact
        fp32 (what ``lm.verify``'s tolerance is calibrated for) names one, with an adapter of at most
        ``MAX_MODEL_BYTES``: a full model is too big to fetch per round, and ``hf``, bf16 or TF32
        draws cannot be redone."""
        cfg = self.sampling
        if self.base is None or self.lora is None or cfg.sampler != "lean" or cfg.dtype != "float32":
            return None
        why = self._inexact or inexact_fp32(self.device, next(self.base.model.parameters()).dtype)
        if why is not None:
            self._warn_once(f"draws not exact fp32 ({why})")
            return None
        blob = adapter_bytes(self.model)
        if len(blob) > MAX_MODEL_BYTES:
            self._warn_once(f"an adapter of {len(blob)} bytes, over the {MAX_MODEL_BYTES} a checker fetches")
            return None
        digest = self.model_digest()
        return f"lm1:{digest.base}:{digest.adapter}:{self.lora.alpha / self.lora.r!r}:{cfg.temperature!r}:{cfg.top_p!r}", blob

    def _warn_once(self, why: str) -> None:
        """Why this peer commits no model, logged once per reason (it holds round after round)."""
        if why != self._told:
            log.warning("%s: this peer commits no model, so no peer can check its bodies", why)
            self._told = why

    def check_work(
        self, seed: ActSeed, bodies: Sequence[Body], model: str, blob: bytes, samples: Sequence[Sequence[int]] | None = None
    ) -> WorkCheck | str:
        """``lm.verify.check_bodies`` of ``bodies`` with the sender's adapter (``blob``, checked
        against the adapter digest ``model`` names) on this peer's shared base, at the sender's
        committed temperature and top-p. Bytes that are not that adapter, and bodies the sampler
        could not have produced (token ids outside the vocabulary, not a TokenRollout) are
        mismatches: the sender signed them. Another base, another adapter shape or LoRA scaling,
        settings under which rounding decides the draws (``MIN_TOP_P``), an adapter over the size
        limit, or another kind of name: this peer cannot check (a string), never a proof."""
        parts = model.split(":")
        if len(parts) != 6 or parts[0] != "lm1":
            return f"an unknown kind of model name ({model[:32]!r})"
        _, base, adapter, scaling, temperature, top_p = parts
        if self.base is None or self.lora is None:
            return "this peer holds no shared base to rebuild adapters on"
        if base != self.base.digest():
            return "another base model"
        inexact = inexact_fp32(self.device, next(self.base.model.parameters()).dtype)
        if inexact is not None:
            return f"this peer's forward is not exact fp32 ({inexact})"
        try:
            t, p, scale = float(temperature), float(top_p), float(scaling)
        except ValueError:
            return f"unreadable settings ({scaling[:16]!r}, {temperature[:16]!r}, {top_p[:16]!r})"
        if not (0 < t < 1e6 and MIN_TOP_P <= p <= 1):
            return f"sampling settings this check cannot redo (temperature {t}, top_p {p}; top_p >= {MIN_TOP_P})"
        if scale != self.lora.alpha / self.lora.r:  # the sender's adapter on this peer's scaling would draw other tokens
            return f"another LoRA scaling (alpha / r {scale!r}, this peer's {self.lora.alpha / self.lora.r!r})"
        if len(blob) > MAX_MODEL_BYTES:
            return f"an adapter of {len(blob)} bytes, over the {MAX_MODEL_BYTES} this peer loads"
        try:
            checked = self.sender_model(blob, adapter)
        except ValueError as e:
            if "does not fit" in str(e):
                return str(e)  # another rank or other target modules than this peer's: not checkable here
            return WorkCheck((f"its committed adapter bytes: {e}",) * len(bodies))  # bytes that hash to what it signed
        out: list[str | None] = [None] * len(bodies)
        tokens = ties = 0
        rollouts = []
        for i, body in enumerate(bodies):
            if samples is not None and isinstance(body, TokenRollout) and not all(0 <= k < len(body.samples) for k in samples[i]):
                return f"sample indices {list(samples[i])[:8]} outside a body of {len(body.samples)}"
            if not isinstance(body, TokenRollout):
                out[i] = f"a {type(body).__name__}, not a TokenRollout"
            elif any(t >= self.vocab_size for t in (*body.prompt_ids, *(x for s in body.samples for x in s.completion_ids))):
                out[i] = f"token ids outside the committed model's vocabulary of {self.vocab_size}"
            elif not body.samples or not all(s.completion_ids and len(s.logprobs) == len(s.completion_ids) for s in body.samples):
                out[i] = "an empty completion, or log-probs that do not match its tokens"
            else:
                rollouts.append((i, body))
        if rollouts:
            threads = torch.get_num_threads()
            if self.sampling.threads:
                torch.set_num_threads(self.sampling.threads)
            try:
                picked = [samples[i] for i, _ in rollouts] if samples is not None else None
                verdicts = check_bodies(
                    checked, [b for _, b in rollouts], seed, t, p, self.eos_ids, samples=picked, packs=self._packs, lora=self._scratch_terms
                )
            finally:
                torch.set_num_threads(threads)
            for (i, _), verdict in zip(rollouts, verdicts, strict=True):
                out[i], tokens, ties = verdict.mismatch, tokens + verdict.tokens, ties + verdict.near_ties
        return WorkCheck(tuple(out), tokens, ties)

    def sender_model(self, blob: bytes, digest: str) -> Any:
        """Another peer's model to check its bodies with (``lm.verify``): this peer's shared base
        with the adapter ``blob`` that hashes to ``digest`` (``load_adapter``: ValueError when it
        does not, or does not fit), in one scratch shell kept for the next check."""
        if self.base is None or self.lora is None:
            raise ValueError("only adapter peers on a shared base can load another peer's adapter")
        if self._scratch is None:
            self._scratch = apply_lora(self.base.shell(), self.lora)
            self._scratch_slots = adapter_slots(self._scratch)
            if self._scratch_slots is not None and supports(self._scratch):  # loads write the tensors the terms read
                decoder = Decoder(self._scratch)
                self._scratch_terms = terms(decoder.layers, decoder.head)
        load_adapter(self._scratch, blob, digest, self._scratch_slots)
        return self._scratch

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
        torch.save({"version": self.version, "seed": self.seed, "draws": self.draws}, directory / "policy.pt")  # the local stream (local_seed)

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
        self.seed, self.draws = int(extra.get("seed", self.seed)), int(extra.get("draws", 0))  # older checkpoints: a torch RNG state
