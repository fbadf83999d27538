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
its copies: each weighs min(1, n * p / copies). So

- k copies of one answer, with any tails, from any number of sender ids, weigh together what this
  peer's own n draws would give that answer's first token (n * p), not k times that: that edge's
  weight does not grow with the number of copies or of ids;
- a lone copy weighs min(1, n * p), the per-copy rule, so completions that share no prefix with
  another are weighed as before;
- it is computed from what this peer holds: the token ids it received and its own probabilities,
  never a sender's claim or identity.

What it leaves: within an edge's budget a sender still chooses which completions go through it
(their tails and, where the reward reads the tail, their advantages' signs), and honest senders'
copies share the budget with a flooder's (rows with no advantage are not counted). p is
conditional on the prefix, so every distinct tail opens fresh edges worth up to 1 each: below the
first token, more ids still add weight, and one answer sent as other token sequences gets a budget
per sequence (a hostile review measured both: docs/trust.md). A budget on the path's joint
probability would bound those; not built. Own completions are not counted: they are this peer's
draws, the measure the budget is set against.
"""

from __future__ import annotations

from collections.abc import Sequence
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
