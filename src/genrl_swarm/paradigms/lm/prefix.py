"""The shared-prompt update: each group's prompt is forwarded once, not once per completion.

A GRPO group is G completions of one prompt; in the plain update every one of the G sequences
carries the prompt, so the prompt's tokens are forwarded and backpropagated G times (on
SmolLM2 with a ~60-token prompt and 64-token completions, half of all update compute). Here:

1. the prompt is forwarded once, with grad, keeping its per-layer keys/values (an HF cache);
2. those keys/values (and the prompt's last hidden state, which predicts the first completion
   token) are detached into leaf tensors; each chunk of completions attends to them, expanded
   over the chunk's rows, and its loss is backpropagated into the parameters *and* the leaves;
3. once every chunk is done, the leaves' accumulated gradients are pushed through the prompts'
   own graph (``torch.autograd.backward(prompt_outputs, leaf_grads)``).

By the chain rule that is the gradient of the plain per-sequence update (tests check it
against one). The distinct prompts of a batch are forwarded together (left-padded, masked);
each chunk picks its rows' prompt keys/values by index (whose backward sums them per prompt),
so the update is two batched forwards however many groups there are: per-call overhead would
otherwise eat the gain on small models. Completions are right-padded within a chunk; pads
come after every real token of their row, so causal attention never lets a real token see
them, and the LM head runs only over real tokens. Samples are grouped on identical prompt
ids, so swarm bodies of the same question (from any peer) share one prompt pass too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from genrl_swarm.paradigms.lm.hf_cache import cache_of, with_cache
from genrl_swarm.paradigms.lm.logprobs import fused_token_logps, plain_token_logps
from genrl_swarm.paradigms.lm.precision import autocast
from genrl_swarm.paradigms.lm.swarm_budget import copies_of


class SampleLike(Protocol):
    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]
    logprobs: Sequence[float]
    advantage: float


@dataclass
class Chunk:
    """Right-padded completions: one forward/backward. Per-token tensors are [n, width] with real
    tokens first in each row (the mask marks them); ``prompt`` is each row's prompt index in its
    PrefixBatch."""

    prompt: torch.Tensor  # [n], long
    completion_ids: torch.Tensor  # [n, width], long
    completion_mask: torch.Tensor  # [n, width], float
    advantages: torch.Tensor  # [n]
    behaviour_logp: torch.Tensor  # [n, width], 0 where the mask is 0
    prox_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    swarm: torch.Tensor | None = None  # [n], 1 for a row another peer sent
    copies: torch.Tensor | None = None  # [n, width], swarm rows through each token's edge (``swarm_budget``), 1 elsewhere


@dataclass
class PrefixBatch:
    """Distinct prompts (left-padded, forwarded together once) and the chunks of completions
    that continue them."""

    prompt_ids: torch.Tensor  # [G, P], long, left-padded
    prompt_mask: torch.Tensor  # [G, P], long
    chunks: list[Chunk] = field(default_factory=list)


@dataclass(frozen=True)
class Chunking:
    """How completions are cut: at most ``rows`` per chunk (and prompts per batch); with
    ``bucket``, sorted by length and a chunk is closed before its padded positions would exceed
    ``max_waste`` of it."""

    rows: int
    bucket: bool = True
    max_waste: float = 0.25


def _chunk(rows: Sequence[tuple[int, SampleLike]], pad_id: int, device: torch.device) -> Chunk:
    width = max(len(s.completion_ids) for _, s in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.float32)
    behaviour = torch.zeros((len(rows), width), dtype=torch.float32)
    copies = torch.ones((len(rows), width), dtype=torch.float32)
    for i, (_, s) in enumerate(rows):
        n = len(s.completion_ids)
        ids[i, :n], mask[i, :n] = torch.tensor(list(s.completion_ids), dtype=torch.long), 1
        behaviour[i, :n], copies[i, :n] = torch.tensor(list(s.logprobs), dtype=torch.float32), copies_of(s)
    adv = torch.tensor([s.advantage for _, s in rows], dtype=torch.float32)
    prompt = torch.tensor([g for g, _ in rows], dtype=torch.long)
    swarm = torch.tensor([float(getattr(s, "swarm", False)) for _, s in rows], dtype=torch.float32)
    to = lambda t: t.to(device)  # noqa: E731
    return Chunk(to(prompt), to(ids), to(mask), to(adv), to(behaviour), swarm=to(swarm), copies=to(copies))


def _cut(rows: list[tuple[int, SampleLike]], how: Chunking) -> list[list[tuple[int, SampleLike]]]:
    if how.bucket:
        rows = sorted(rows, key=lambda r: -len(r[1].completion_ids))
    out: list[list[tuple[int, SampleLike]]] = []
    for row in rows:
        cur = out[-1] if out else None
        if cur is not None and len(cur) < how.rows:
            width = max(len(cur[0][1].completion_ids), len(row[1].completion_ids))
            real = sum(len(s.completion_ids) for _, s in cur) + len(row[1].completion_ids)
            if not how.bucket or 1 - real / (width * (len(cur) + 1)) <= how.max_waste:
                cur.append(row)
                continue
        out.append([row])
    return out


def group_by_prompt(samples: Sequence[SampleLike], how: Chunking, pad_id: int, device: torch.device) -> list[PrefixBatch]:
    """Samples grouped on identical prompt ids (first-seen order), ``how.rows`` prompts per
    batch; each batch's completions cut into chunks (across prompts when bucketing)."""
    groups: dict[tuple[int, ...], list[SampleLike]] = {}
    for s in samples:
        groups.setdefault(tuple(s.prompt_ids), []).append(s)
    prompts = list(groups)
    out = []
    for lo in range(0, len(prompts), how.rows):
        block = prompts[lo : lo + how.rows]
        width = max(map(len, block))
        ids = torch.full((len(block), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(block), width), dtype=torch.long)
        for i, p in enumerate(block):
            ids[i, width - len(p) :], mask[i, width - len(p) :] = torch.tensor(p, dtype=torch.long), 1
        rows = [(i, s) for i, p in enumerate(block) for s in groups[p]]
        chunks = [_chunk(c, pad_id, device) for c in _cut(rows, how)]
        out.append(PrefixBatch(ids.to(device), mask.to(device), chunks))
    return out


@dataclass
class SharedPrefixForward:
    """Scores a PrefixBatch's chunks for a causal LM whose decoder returns normalised hidden
    states and a cache (HF Llama-style: ``get_decoder()`` and ``get_output_embeddings()``)."""

    temperature: float
    fused: bool = True  # fused_token_logps (chunked, memory-light) vs plain_token_logps
    dtype: torch.dtype = torch.float32  # matmul precision of the forward (bf16 under autocast)

    def _head(self, model: Any, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        head = model.get_output_embeddings()
        if getattr(head, "bias", None) is not None:
            raise ValueError("the shared-prefix update expects an LM head without bias")
        if self.fused:  # float32 compute means "the weights' own dtype" (float64 in the exactness tests)
            dtype = head.weight.dtype if self.dtype == torch.float32 else self.dtype
            return fused_token_logps(hidden, head.weight, targets, self.temperature, dtype)
        return plain_token_logps(hidden, head.weight, targets, self.temperature)

    def _chunk_logps(
        self, model: Any, batch: PrefixBatch, kv: Sequence[tuple[torch.Tensor, torch.Tensor]], last: torch.Tensor, chunk: Chunk
    ) -> torch.Tensor:
        """[n, width] log-probs of the chunk's tokens (0 at pads) given the prompts' cache."""
        n, width = chunk.completion_ids.shape
        device, rows = chunk.completion_ids.device, chunk.prompt
        states = [last[rows]]
        if width > 1:  # the last token of a row predicts nothing: it is never fed
            from transformers import DynamicCache  # the optional "examples" extra, needed only here

            cache = DynamicCache(ddp_cache_data=[(k[rows], v[rows]) for k, v in kv])
            prompt_mask = batch.prompt_mask[rows]
            positions = prompt_mask.sum(1, keepdim=True) + torch.arange(width - 1, device=device)
            mask = torch.cat([prompt_mask, torch.ones((n, width - 1), dtype=prompt_mask.dtype, device=device)], 1)
            decoder = model.get_decoder()
            with autocast(self.dtype, device.type):
                out = decoder(
                    input_ids=chunk.completion_ids[:, :-1], attention_mask=mask, position_ids=positions,
                    use_cache=True, **with_cache(decoder, cache),
                )  # fmt: skip
            states.append(out.last_hidden_state)
        hidden = torch.cat(states, dim=1)
        real = chunk.completion_mask.bool()
        values = self._head(model, hidden[real], chunk.completion_ids[real])
        return torch.zeros((n, width), dtype=values.dtype, device=values.device).masked_scatter(real, values)

    def _prompt(self, model: Any, batch: PrefixBatch) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        positions = (batch.prompt_mask.cumsum(1) - 1).clamp(min=0)
        with autocast(self.dtype, batch.prompt_ids.device.type):
            out = model.get_decoder()(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, position_ids=positions, use_cache=True)
        kv = [(layer.keys, layer.values) for layer in cache_of(out).layers]
        return out.last_hidden_state[:, -1:], kv

    @torch.no_grad()
    def logps(self, model: Any, batch: PrefixBatch) -> list[torch.Tensor]:
        """Each chunk's log-probs, no graph (stored proximal / reference log-probs)."""
        last, kv = self._prompt(model, batch)
        return [self._chunk_logps(model, batch, kv, last, c) for c in batch.chunks]

    def backward(self, model: Any, batch: PrefixBatch, loss_of: Callable[[torch.Tensor, Chunk], torch.Tensor]) -> None:
        """Backpropagates ``loss_of(logp, chunk)`` summed over the batch's chunks."""
        last, kv = self._prompt(model, batch)
        last_leaf = last.detach().requires_grad_()
        # A prompt output no trainable parameter feeds (layer 0's keys when LoRA adapts only q and v)
        # has no graph: its leaf asks for no gradient, so none is computed or pushed back.
        kv_leaves = [(k.detach().requires_grad_(k.requires_grad), v.detach().requires_grad_(v.requires_grad)) for k, v in kv]
        for chunk in batch.chunks:
            loss_of(self._chunk_logps(model, batch, kv_leaves, last_leaf, chunk), chunk).backward()
        outputs = [last, *(t for pair in kv for t in pair)]
        leaves = [last_leaf, *(t for pair in kv_leaves for t in pair)]
        pairs = [(o, leaf.grad) for o, leaf in zip(outputs, leaves) if leaf.grad is not None]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
