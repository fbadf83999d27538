"""The lean sampler's loop over a preallocated KV buffer (``lm.decoder``).

Same contract and same distribution as ``sampling.sample`` (it shares ``pick``): each prompt is
prefilled once and fanned out to its ``n`` rows, behaviour log-probs come from the logits the
tokens were drawn from, in the precision the model runs in. What differs is the cache: keys and
values are written in place instead of concatenated, and a finished row leaves the batch at
once by handing its place to a still-active row from the back (``KVBuffer.compact``: only the
finished rows' keys and values move, not the whole cache). Rows then change order, but each
output row draws with its own key (``lm.seeding``), so the samples are the dynamic path's up to
the logits' rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from genrl_swarm.core.interfaces import RunInterrupted
from genrl_swarm.paradigms.lm.decoder import Decoder, KVBuffer
from genrl_swarm.paradigms.lm.sampling import Sampled, pick, uniforms_of
from genrl_swarm.paradigms.lm.seeding import Uniforms

StepFn = Callable[[torch.Tensor, torch.Tensor, KVBuffer, int], torch.Tensor]


@torch.inference_mode()
def sample_static(
    decoder: Decoder,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    n: int,
    max_new_tokens: int,
    eos_ids: Sequence[int],
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    uniforms: Uniforms | None = None,
    stop: Callable[[], bool] | None = None,
    step_fn: StepFn | None = None,
) -> Sampled:
    """``n`` completions of each left-padded prompt in ``input_ids`` [B, L] (see ``sampling.sample``).

    ``step_fn`` replaces ``decoder.step`` (a compiled version of it, say)."""
    advance: StepFn = step_fn or decoder.step
    device = input_ids.device
    width = input_ids.shape[1]
    buffer, logits = decoder.prefill(input_ids, attention_mask, n, width + max_new_tokens)
    position = attention_mask.sum(1).repeat_interleave(n)  # the next token's position in each row
    total = logits.shape[0]
    rows = torch.arange(total, device=device)  # which output row each batch row is
    ids = torch.zeros((total, max_new_tokens), dtype=torch.long, device=device)
    logprobs = torch.zeros((total, max_new_tokens), dtype=torch.float32, device=device)
    lengths = torch.zeros(total, dtype=torch.long, device=device)
    stopped = torch.zeros(total, dtype=torch.bool, device=device)
    eos = torch.tensor(list(eos_ids), dtype=torch.long, device=device)
    for step in range(max_new_tokens):
        if stop is not None and stop():
            raise RunInterrupted("generation interrupted")
        token, token_logp = pick(logits, temperature, top_p, greedy, None if greedy else uniforms_of(uniforms).at(rows, step))
        ids[rows, step], logprobs[rows, step] = token, token_logp
        active = ~torch.isin(token, eos)
        alive = int(active.sum())  # one host sync per step decides everything below
        if alive < len(rows):
            done = rows[~active]
            stopped[done], lengths[done] = True, step + 1
        if step == max_new_tokens - 1 or alive == 0:
            lengths[rows[active]] = step + 1  # cut at the token limit
            break
        if alive < len(rows):
            buffer, order = buffer.compact(active)
            rows, token, position = rows[order], token[order], position[order]
        logits = advance(token, position, buffer, width + step)
        position = position + 1
    return Sampled(ids, logprobs, lengths, stopped)
