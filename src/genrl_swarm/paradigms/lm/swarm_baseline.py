"""GRPO advantages a sender's group composition cannot tilt (issue 42.3).

GRPO normalises each group's rewards by the group's own mean and spread. For a group another
peer sent, both are that peer's choice: one good-but-not-best completion among deliberately bad
ones gets a large advantage, and repeating a completion repeats its push. So:

- a swarm group whose prompt (stage, task) this peer answered itself this round is measured
  against **this peer's own group** for it: (reward − own mean) / own scale (the own group's
  spread, ``group``; the spread of all own rewards this round, ``batch``; none, ``none``),
  clipped for ``group`` and ``batch`` to what an own completion can reach (a z-score among n
  values is at most sqrt(n − 1)): better than this peer does is pushed up, worse down, whatever
  else the sender put in the group, and a completion repeated in it counts once;
- own groups are normalised as before, with ``batch``'s spread taken over own rewards only.

Not covered: a swarm group for a prompt this peer did not answer (per-peer questions, as in the
SAPO recipes) has no own baseline and is normalised by itself, repeats included (``batch``: by
its own rewards' spread), so its composition still sets its scale (within the external share and
``grpo.max_external_per_sender``); its tokens' weights are this peer's (``grpo_loss``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from genrl_swarm.core import ScoredRollout
from genrl_swarm.paradigms.lm.grpo_loss import Scale, group_advantages

EPS = 1e-4  # group_advantages' own


def distinct(completions: Sequence[Sequence[int]]) -> list[int]:
    """Indices of the first occurrence of each distinct completion."""
    seen: set[tuple[int, ...]] = set()
    keep = []
    for i, ids in enumerate(completions):
        key = tuple(ids)
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return keep


def advantages(chosen: Sequence[ScoredRollout], me: str | None, scale: Scale) -> list[tuple[list[int], torch.Tensor]]:
    """Per group of ``chosen``: (the samples it keeps, their advantages). ``me`` None: every
    group is normalised by itself (no own baseline known)."""
    own = [me is not None and s.rollout.peer_id == me for s in chosen]
    everything = [list(range(len(s.rewards))) for s in chosen]
    rewards = [torch.tensor(s.rewards, dtype=torch.float32) for s in chosen]
    own_rewards = {(s.rollout.stage, s.rollout.task_id): r for s, r, mine in zip(chosen, rewards, own) if mine}
    own_all = [r for r, mine in zip(rewards, own) if mine]
    spread = float(torch.cat(own_all).std(unbiased=False)) if own_all else 1.0
    normalised = iter(group_advantages(own_all, scale))
    out = []
    for s, every, r, mine in zip(chosen, everything, rewards, own):
        base = own_rewards.get((s.rollout.stage, s.rollout.task_id))
        if mine:
            out.append((every, next(normalised)))
        elif base is None:
            out.append((every, group_advantages([r], scale)[0]))
        else:
            keep = distinct([x.completion_ids for x in s.rollout.body.samples])
            out.append((keep, against(r[keep], base, scale, spread)))
    return out


def against(rewards: torch.Tensor, own: torch.Tensor, scale: Scale, batch_spread: float) -> torch.Tensor:
    """``rewards`` measured against this peer's own group ``own`` for the same prompt."""
    centred = rewards - own.mean()
    if scale == "none":
        return centred
    denominator = float(own.std(unbiased=False)) if scale == "group" else batch_spread
    bound = math.sqrt(max(len(own) - 1, 1))
    return (centred / (denominator + EPS)).clamp(-bound, bound)
