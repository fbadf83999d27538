"""Spot checks: one forward pass redoes a body's seeded draws (issue 45.4, the check itself).

Why: with seeded sampling (``lm.seeding``) a body's tokens are a function of the sender's model
and public numbers, so a receiver holding that model (an adapter fetched by its committed digest,
on the base every peer shares) needs no trust in the sender: it recomputes the logits of prompt +
completion in one teacher-forced pass (``lm.teacher_forced``: on the sampler's decoder and packed
kernels, the prompt once per body) and, token by token, asks whether the sampler with the
public ``u`` picks the token sent, and whether the claimed behaviour log-prob is the recomputed
one. A best-of-n pick, tokens from another model or adapter, and tokens from no model at all fail
(tests/test_spot_checks.py); an honest sender on other threads, kernels or machines differs only
by rounding.

Rounding is what the tolerance is for. The sampler picks token j when ``u`` falls in
[lo_j, hi_j), the cumulative probability before and after j (in vocabulary order; by descending
probability inside the nucleus when top_p < 1). Logits that differ by rounding move these edges
by a little, so a ``u`` within ``Tolerance.mass`` of an edge is a *near tie*: another honest
implementation may pick the neighbour. Such tokens, and tokens whose nucleus depends on rounding
(the token's own preceding mass within ``mass`` of top_p; tokens that are in or out of the nucleus
by rounding also widen every edge's tolerance by their renormalised mass), are skipped and counted; the tokens after
them are still checked (teacher forcing conditions on what was sent). Everything else that
fails is a *mismatch*, which no honest sender produces: the verdict names the sample, the token
and why, so the body, the sender's signed commitment and its adapter prove it to anyone.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from genrl_swarm.core import ActSeed, TokenRollout
from genrl_swarm.paradigms.lm.adapters import LayerTerms, terms
from genrl_swarm.paradigms.lm.decoder import Decoder, supports
from genrl_swarm.paradigms.lm.packed import PackCache
from genrl_swarm.paradigms.lm.sampling import BLOCK
from genrl_swarm.paradigms.lm.seeding import row_key, uniform
from genrl_swarm.paradigms.lm.teacher_forced import chunk_logits

#: Rows of logits whose nucleus ``intervals`` sorts at once (float64 and int64 copies of the vocabulary).
ROWS = 64
#: Rows of logits ``tempered`` scales, exponentiates and sums at once: a SmolLM2 row is 192 KB, so
#: a group stays in a core's L2 cache between its passes (groups of 3-4 fastest, 2026-11-28).
EDGE_ROWS = 4


@dataclass(frozen=True)
class Tolerance:
    """How far an honest recomputation may be from the sender's: ``mass`` in cumulative
    probability (an edge of a token's interval), ``logprob`` in a claimed behaviour log-prob.
    The defaults hold fp32 samplers on any thread count, packed or not (calibrated in
    tests/test_spot_checks.py and docs/benchmarks.md); a bf16 sampler needs looser ones."""

    mass: float = 5e-4
    logprob: float = 5e-3


@dataclass(frozen=True)
class Verdict:
    """What checking one body found: ``tokens`` redone, ``near_ties`` skipped, the first
    ``mismatch`` (None: the body is what the public draw gives), the largest log-prob error."""

    tokens: int
    near_ties: int
    mismatch: str | None = None
    worst_logprob_error: float = 0.0

    @property
    def ok(self) -> bool:
        return self.mismatch is None


@dataclass(frozen=True)
class Draws:
    """Per completion token of one sample: where the sampler's ``u`` must fall, [lo, hi), the
    recomputed log-prob, whether rounding could move the token itself in or out of the nucleus
    (``edge``), and how far rounding could move the edges through the nucleus's normaliser
    (``slack``: the renormalised mass of the tokens whose place in it is a matter of rounding)."""

    lo: torch.Tensor
    hi: torch.Tensor
    logprob: torch.Tensor
    edge: torch.Tensor
    slack: torch.Tensor

    def split(self, sizes: Sequence[int]) -> list[Draws]:
        """The draws of consecutive samples of ``sizes`` tokens each (computed together)."""
        fields = (self.lo, self.hi, self.logprob, self.edge, self.slack)
        return [Draws(*parts) for parts in zip(*(f.split(list(sizes)) for f in fields), strict=True)]


def intervals(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float,
    top_p: float,
    mass: float,
    overwrite: bool = False,
    rows: torch.Tensor | None = None,
) -> Draws:
    """``Draws`` of ``tokens`` [T] under ``logits`` [T, V] (or, given ``rows`` [T], under
    ``logits[rows]``: a row several tokens were drawn from is computed once), as ``sampling.pick``
    draws: without a nucleus in its own arithmetic (``tempered``; ``overwrite``: in ``logits``' own
    memory), with one in float64 over the vocabulary, ``ROWS`` tokens at a time (a chunk of a
    teacher-forced pass holds up to 512)."""
    if top_p >= 1.0:
        return tempered(logits, tokens, temperature, overwrite, rows)
    if rows is not None:
        logits = logits[rows]
    parts = [nucleus(logits[i : i + ROWS], tokens[i : i + ROWS], temperature, top_p, mass) for i in range(0, len(tokens), ROWS)]
    return Draws(*(torch.cat(f) for f in zip(*((d.lo, d.hi, d.logprob, d.edge, d.slack) for d in parts), strict=True)))


def nucleus(logits: torch.Tensor, tokens: torch.Tensor, temperature: float, top_p: float, mass: float) -> Draws:
    """``intervals`` with a nucleus (``top_p`` < 1): the vocabulary sorted and cumulated in float64."""
    scaled = logits.double()
    if temperature != 1.0:
        scaled = (scaled - scaled.amax(-1, keepdim=True)) / temperature
    probs = torch.softmax(scaled, -1)
    index = tokens[:, None]
    ranked, order = probs.sort(dim=-1, descending=True, stable=True)
    before = ranked.cumsum(-1) - ranked
    kept = before < top_p
    total = (ranked * kept).sum(-1, keepdim=True)
    q = ranked * kept / total
    rank = (order == index).long().argmax(-1, keepdim=True)
    lo = (q.cumsum(-1) - q).gather(-1, rank).squeeze(-1)
    p = q.gather(-1, rank).squeeze(-1)
    unsure = (before - top_p).abs() < mass  # in or out of the nucleus by rounding
    slack = (ranked * unsure).sum(-1) / total.squeeze(-1)
    return Draws(lo, lo + p, p.log(), unsure.gather(-1, rank).squeeze(-1), slack)


def tempered(logits: torch.Tensor, tokens: torch.Tensor, temperature: float, overwrite: bool = False, rows: torch.Tensor | None = None) -> Draws:
    """``intervals`` without a nucleus, computed as ``sampling.draw_tempered`` draws: float32
    weights ``exp(scaled - max)``, summed per ``BLOCK`` of the vocabulary in float32, the blocks'
    running sum and the token's block's own in float64. An edge is then the sampler's own up to
    the logits' rounding, and the vocabulary is read in float32 three times (the float64 softmax,
    running sum and log-softmax of the whole vocabulary cost a SmolLM2 body of 128 tokens 40-80 ms).

    ``overwrite`` (float32 ``logits`` the caller no longer needs, as a spot check's): the weights
    are computed in the logits' own memory, the same operations in place. A SmolLM2 body's logits
    are ~23 MB, and a fresh tensor of that size for each check cost ~5 ms of a check (a loaded
    2-core Xeon, 2026-11-28). ``rows`` [T]: the row of ``logits`` each token was drawn from (None:
    its own), so a row shared by several tokens is exponentiated and summed once.

    The rows are scaled, exponentiated and summed ``EDGE_ROWS`` at a time, each group while it is
    in the core's cache (four whole-vocabulary passes over 23 MB each cost as much again as the
    arithmetic: 10 ms, 5.6-5.9 in groups of 3-4 rows). Each row's numbers are the same operations
    on the same values as over all rows at once, so the same bits (tests/test_spot_checks.py)."""
    scaled = logits.float()
    if not (overwrite and scaled is logits):
        scaled = scaled.clone()  # the arithmetic below runs in place
    height, vocab = scaled.shape
    every = torch.arange(height) if rows is None else rows  # each token's row
    raw = scaled[every, tokens]  # read before the weights take the values' place
    top = scaled.new_empty(height, 1)
    peak = scaled.new_empty(height, 1) if temperature != 1.0 else top  # each row's largest logit, before the temperature
    sums = scaled.new_empty(height, -(-vocab // BLOCK))
    pad = -vocab % BLOCK
    for i in range(0, height, EDGE_ROWS):
        group = scaled[i : i + EDGE_ROWS]
        if temperature != 1.0:
            group.sub_(torch.amax(group, -1, keepdim=True, out=peak[i : i + EDGE_ROWS])).div_(temperature)
        weights = group.sub_(torch.amax(group, -1, keepdim=True, out=top[i : i + EDGE_ROWS])).exp_()
        if pad:  # weight 0 past the vocabulary: never drawn
            weights = torch.nn.functional.pad(weights, (0, pad))
        torch.sum(weights.view(len(group), -1, BLOCK), -1, out=sums[i : i + EDGE_ROWS])
    # A token's scaled value is the same subtraction and division of its logit alone (elementwise: the same bits).
    own32 = (raw - peak[every, 0]) / temperature if temperature != 1.0 else raw
    own = own32.double()
    blocks = (torch.nn.functional.pad(scaled, (0, pad)) if pad else scaled).view(height, -1, BLOCK)
    cdf = sums.double().cumsum(-1)[every]
    total = cdf[:, -1]
    block, column = tokens // BLOCK, tokens % BLOCK
    mine = torch.arange(len(tokens))
    earlier = torch.where(block > 0, cdf[mine, (block - 1).clamp(min=0)], torch.zeros_like(total))
    inner = blocks[every, block].cumsum(-1, dtype=torch.float64)  # the token's block only
    lo = earlier + torch.where(column > 0, inner[mine, (column - 1).clamp(min=0)], torch.zeros_like(total))
    hi = earlier + inner[mine, column]
    logprob = own - top[every, 0].double() - total.log()
    none = torch.zeros_like(total)
    return Draws(lo / total, hi / total, logprob, none.bool(), none)


def forward_logits(model: Any, sequences: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[torch.Tensor]:
    """Each (prompt, completion)'s next-token logits over its completion [len, V], in one
    teacher-forced pass (left padding)."""
    length = max(len(p) + len(c) for p, c in sequences)
    ids = torch.zeros((len(sequences), length), dtype=torch.long)
    mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, (prompt, completion) in enumerate(sequences):
        seq = [*prompt, *completion]
        ids[row, length - len(seq) :], mask[row, length - len(seq) :] = torch.tensor(seq), 1
    device = next(model.parameters()).device
    ids, mask = ids.to(device), mask.to(device)
    model.eval()  # as the sampler runs it (a learner leaves it in train mode: LoRA dropout)
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0), use_cache=False)
    logits = out.logits.float().cpu()
    return [logits[row, length - len(c) - 1 : length - 1] for row, (_, c) in enumerate(sequences)]


def shared_prompt_logits(model: Any, prompt: Sequence[int], completions: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """``forward_logits`` of one body's samples, which share their prompt: the prompt forwarded
    once, its keys and values repeated for each completion (right padding). What a body costs to
    check is then the prompt once and the completions' tokens, not the prompt per sample."""
    device = next(model.parameters()).device
    n, width, start = len(completions), max(len(c) for c in completions), len(prompt)
    ids = torch.zeros((n, width), dtype=torch.long)
    mask = torch.ones((n, start + width), dtype=torch.long)
    for row, completion in enumerate(completions):
        ids[row, : len(completion)] = torch.tensor(list(completion))
        mask[row, start + len(completion) :] = 0
    positions = torch.arange(start, start + width).expand(n, -1)
    model.eval()  # as the sampler runs it (a learner leaves it in train mode: LoRA dropout)
    with torch.inference_mode():
        head = model(input_ids=torch.tensor([list(prompt)], device=device), use_cache=True)
        cache = head.past_key_values
        cache.batch_repeat_interleave(n)
        out = model(
            input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device), past_key_values=cache, use_cache=True
        )
    first, rest = head.logits[0, -1:].float().cpu(), out.logits.float().cpu()
    return [torch.cat([first, rest[row, : len(c) - 1]]) for row, c in enumerate(completions)]


def check_body(
    model: Any, body: TokenRollout, seed: ActSeed, temperature: float, top_p: float, eos_ids: Sequence[int], tolerance: Tolerance = Tolerance()
) -> Verdict:
    """Whether ``body`` is what ``model`` draws with the public numbers of ``seed`` (``lm.seeding``)."""
    return check_bodies(model, [body], seed, temperature, top_p, eos_ids, tolerance)[0]


def check_bodies(
    model: Any,
    bodies: Sequence[TokenRollout],
    seed: ActSeed,
    temperature: float,
    top_p: float,
    eos_ids: Sequence[int],
    tolerance: Tolerance = Tolerance(),
    rows: int = 64,
    samples: Sequence[Sequence[int]] | None = None,
    packs: PackCache | None = None,
    lora: Sequence[LayerTerms] | None = None,
) -> list[Verdict]:
    """``check_body`` of each of one sender's ``bodies``. ``samples``: per body, the indices of the
    samples to redo (each keeps its own key); None: all of them. The logits come from one
    teacher-forced pass per body on the sampler's decoder (``lm.teacher_forced``), on the base's
    packed weights from ``packs`` when given (the sender's LoRA terms added on top); a model the
    decoder does not support runs its own forward, the prompt once and ``rows`` samples at a time
    after it (``shared_prompt_logits``). ``lora``: ``model``'s ``adapters.terms`` when the caller
    keeps them (a scratch model whose adapter is written in place: the terms read its live tensors)."""
    decoder = Decoder(model) if supports(model) else None
    if decoder is not None and packs is not None:
        packed = packs.get(decoder)
        if packed is None:
            lora = None
        elif lora is None:
            lora = terms(decoder.layers, decoder.head)
        decoder.packed = packed if lora is not None else None  # the base's maps, the sender's terms added in the pass
    modules_run = decoder is None or decoder.packed is None  # the packed pass computes the LoRA terms itself: no dropout to turn off
    if modules_run and any(m.training for m in model.modules()):  # a learner leaves it in train mode (LoRA dropout); the sampler runs it in eval
        model.eval()  # (setting it walks ~2,500 modules of a PEFT SmolLM2: 6 ms a check, where reading the flags costs 2)
    out = []
    for b, body in enumerate(bodies):
        picked = sorted(set(samples[b])) if samples is not None else list(range(len(body.samples)))
        completions = [body.samples[k].completion_ids for k in picked]
        draws: dict[int, Draws] = {}
        for group, logits, drawn in _logits(model, decoder, body.prompt_ids, completions, rows, lora):
            ids = torch.tensor([t for i in group for t in completions[i]])
            with torch.inference_mode():  # the pass's logits are inference tensors, written in place here
                computed = intervals(logits, ids, temperature, top_p, tolerance.mass, True, drawn).split([len(completions[i]) for i in group])
            draws.update((picked[i], d) for i, d in zip(group, computed, strict=True))
        out.append(verdict(body, draws, seed, set(eos_ids), tolerance))
    return out


def _logits(
    model: Any,
    decoder: Decoder | None,
    prompt: Sequence[int],
    completions: Sequence[Sequence[int]],
    rows: int,
    lora: Sequence[LayerTerms] | None = None,
) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor | None]]:
    """``teacher_forced.chunk_logits`` where the decoder runs ``model`` and there is a prompt (with
    ``lora``, the LoRA terms on its packed base maps); else the model's own forward, all at once."""
    if decoder is not None and prompt:  # the verdicts read them on the CPU, whatever device ran the pass
        for group, logits, drawn in chunk_logits(decoder, prompt, completions, lora=lora):
            yield group, logits.cpu(), drawn
        return
    if not prompt:  # nothing to share: a plain teacher-forced pass
        each = forward_logits(model, [((), c) for c in completions])
    else:
        each = [x for i in range(0, len(completions), rows) for x in shared_prompt_logits(model, prompt, completions[i : i + rows])]
    yield list(range(len(completions))), torch.cat(each), None  # a row per token


def verdict(body: TokenRollout, draws: dict[int, Draws], seed: ActSeed, eos: set[int], tolerance: Tolerance) -> Verdict:
    """The verdict on the samples of ``body`` that ``draws`` holds (sample index -> its draws), in
    float64 as Python floats (a token's few comparisons cost less than reading tensor elements).

    A token whose nucleus is uncertain (``slack`` s > 0: tokens of that renormalised mass are in or
    out of it by rounding) may have been drawn from a nucleus whose total differs by up to that
    mass, so its claimed log-prob may differ by up to -log(1 - s) on top of ``tolerance.logprob``
    (a false alarm the tiny model hit once in 1,024 bodies at top_p 0.95: s = 0.0143, 0.0145 off)."""
    tokens = ties = 0
    worst = 0.0
    for k, d in draws.items():
        sample = body.samples[k]
        ids = list(sample.completion_ids)
        if any(t in eos for t in ids[:-1]) or (sample.finish_reason == "stop") != (ids[-1] in eos):
            return Verdict(tokens, ties, f"sample {k}: the sampler stops at its first EOS, and only there ({sample.finish_reason})", worst)
        key = row_key(seed, body.input_digest, k)
        lo, hi, logprob, edge = d.lo.tolist(), d.hi.tolist(), d.logprob.tolist(), d.edge.tolist()
        slack = d.slack.tolist()
        margin = [tolerance.mass + x for x in slack]
        for t in range(len(ids)):
            u, m = uniform(key, t), margin[t]
            inside = lo[t] - m <= u < hi[t] + m
            if not (lo[t] + m <= u < hi[t] - m and not edge[t]) and (inside or edge[t]):
                ties += 1
                continue
            tokens += 1
            if not inside:
                where = f"[{lo[t]:.6f}, {hi[t]:.6f})" if math.isfinite(logprob[t]) else "outside the nucleus"
                return Verdict(
                    tokens, ties, f"sample {k} token {t} ({ids[t]}): the public draw u={u:.6f} does not pick it, its interval is {where}", worst
                )
            error = abs(sample.logprobs[t] - logprob[t])
            worst = max(worst, error)
            if error > tolerance.logprob + (-math.log1p(-slack[t]) if slack[t] < 1 else math.inf):
                return Verdict(tokens, ties, f"sample {k} token {t}: claimed log-prob {sample.logprobs[t]:.5f}, recomputed {logprob[t]:.5f}", worst)
    return Verdict(tokens, ties, None, worst)
