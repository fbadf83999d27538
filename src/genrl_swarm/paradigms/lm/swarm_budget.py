"""What all swarm completions for one prompt may weigh together (issue 42: the GRPO flood).

A swarm token weighs min(1, n * p) (``grpo_loss.behaviour_of``), p this peer's own probability of
it after its prefix, n the completions this peer draws per prompt: one copy of a token weighs what
this peer's own n draws would give it in expectation. That bound is per copy, so k copies of the
same prefix weighed k times it: a flooder sent a wrong answer the receiver already finds likely
three times with different tails (no copy a repeat that counts once, ``swarm_baseline``), and
from more sender ids (free: Sybils) more times still (measured in docs/trust.md).

The budget is per **edge** instead. Every swarm completion this peer trains on in one update, from
every sender together, is a path in a trie of token prefixes rooted at its prompt; an edge is a
(prompt + prefix, next token) pair, and the copies through it are the swarm completions that
share that prefix and token. The edge's total weight is min(copies, n * p), shared equally among
its copies: each weighs min(1, n * p / copies) (p: the path's own probability, below). So

- k copies of one answer, with any tails, from any number of sender ids, weigh together what this
  peer's own n draws would give that answer's first token (n * p), not k times that: that edge's
  weight does not grow with the number of copies or of ids;
- a lone copy weighs min(1, n * p), the per-copy rule at the first token, so completions that
  share no prefix with another are weighed as they were there;
- it is computed from what this peer holds: the token ids it received and its own probabilities,
  never a sender's claim or identity.

**The path's own probability.** p is conditional on the prefix, so the edge budget alone let
every distinct tail open fresh edges worth up to 1 each, however unlikely the prefix: a token
likely after an unlikely one (a blank after the decoy, then a zero-reward digit) weighed ~1, and
each sender id's own tails added weight below the first token (a hostile review measured it:
docs/trust.md). So the budget of an edge is set by what this peer's own n draws would give it in
expectation, n * P(prompt + prefix + token) = n * the product of this peer's own probabilities
along the path (``path_draws``): a copy weighs min(1, n * P(path) / copies). Over the edges at one
depth these probabilities sum to at most 1, so everything the swarm sends weighs at most n per
position, whatever the number of ids, tails or token sequences for one answer; the first token's
budget is unchanged (its prefix is empty). It is computed row by row from the proximal log-probs
the loss holds anyway (every copy of an edge has the same prefix, so the same P), the same on the
shared-prefix and plain paths and across micro-batches.

A path through an end-of-sequence id before its last token is one this peer's sampler never
draws (it stops there): such swarm bodies are not trained on (``eos_inside``). Other special ids
are not refused: the samplers do not mask them, and the tiny model draws ``<|im_start|>`` after a
newline (54 of 800 32-token samples); their paths weigh what the joint probability gives them.

What it leaves: within an edge's budget a sender still chooses which completions go through it
(their tails and, where the reward reads the tail, their advantages' signs), and honest senders'
copies share the budget with a flooder's (rows with no advantage are not counted). It bounds
honest tails too: a swarm completion weighs, deep in it, what this peer would draw it with,
which on long completions is little. Own completions are not counted: they are this peer's
draws, the measure the budget is set against.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class _Edge:
    """A trie edge: the copies through it, and the edges below it."""

    copies: int = 0
    below: dict[int, _Edge] = field(default_factory=dict)


def edge_copies(rows: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[tuple[int, ...]]:
    """Per (prompt ids, completion ids) row, per completion token: how many rows go through the
    same edge (the same prompt, the same tokens up to and including this one). One pass over the
    tokens (a trie, not a key per prefix: that would cost the square of the length)."""
    roots: dict[tuple[int, ...], _Edge] = {}
    paths: list[list[_Edge]] = []
    for prompt, completion in rows:
        edge, path = roots.setdefault(tuple(prompt), _Edge()), []
        for token in completion:
            edge = edge.below.setdefault(int(token), _Edge())
            edge.copies += 1
            path.append(edge)
        paths.append(path)
    return [tuple(e.copies for e in path) for path in paths]


def copies_of(sample: object) -> torch.Tensor:
    """A row's per-token copies (float32) from its ``copies`` (empty, or none: 1 per token, the
    row's own edge; own rows, and every row when the budget is off)."""
    completion = getattr(sample, "completion_ids")
    copies = tuple(getattr(sample, "copies", ())) or (1,) * len(completion)
    return torch.tensor(copies, dtype=torch.float32)


#: A path whose own log-probability is below this weighs as if it were this (n * e^-60 ~ 1e-26 *
#: n): a weight of 0 would put -log 0 into the loss's statistics.
MIN_PATH_LOGP = -60.0


def path_draws(draws: float, prox_logp: torch.Tensor, mask: torch.Tensor, copies: torch.Tensor | None) -> float | torch.Tensor:
    """Per token ([B, T]), the n of its weight min(1, n * p) (``grpo_loss.behaviour_of``) that makes
    it this edge's share of the path budget: ``draws`` * P(the prefix before it) / ``copies``, P
    the product of this peer's own probabilities (``prox_logp``, detached) of the row's earlier
    completion tokens (``mask`` marks them, in any layout), so the weight is min(1, n * P(prefix +
    token) / copies). ``draws`` inf (the bound off): inf. A log-prob that is -inf or NaN (a token
    this peer's model cannot produce, or a broken forward) counts as the least probable path, so
    the tokens after it weigh ~0 instead of NaN (-inf - -inf) poisoning the whole update."""
    if math.isinf(draws):
        return draws
    own = prox_logp.detach().nan_to_num(nan=MIN_PATH_LOGP, neginf=MIN_PATH_LOGP, posinf=0.0)
    logp = torch.where(mask > 0, own, torch.zeros_like(own))
    prefix = (logp.cumsum(1) - logp).clamp(min=MIN_PATH_LOGP)
    out = draws * prefix.exp()
    return out if copies is None else out / copies


def eos_inside(completions: Iterable[Sequence[int]], eos_ids: Iterable[int]) -> int | None:
    """The index of the first completion with an end-of-sequence id before its last token, or
    None: a sampler stops at the first one, so no honest peer sends it."""
    stop = set(eos_ids)
    for k, ids in enumerate(completions):
        if any(int(t) in stop for t in list(ids)[:-1]):
            return k
    return None
