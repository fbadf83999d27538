"""Step-level advantages (GiGPO's anchor states) as pure functions, tested by hand.

Episode-level GRPO gives every model turn of an episode the same advantage: in a long episode
the turn that found the answer and the turn that wasted a tool call share one credit. GiGPO
(Feng et al., 2025) adds a second grouping without extra rollouts: episodes of one task often
pass through the *same* environment state (the same prompt at turn 0; the same tool result or
format error later), and the turns taken from one state form a step group. Within it, a turn's
advantage is its discounted return-to-go minus the step group's mean (over the std), so turns
are compared with the alternatives actually tried from that same state.

Anchor state. A state is the observation history up to a model turn: every environment-written
turn (system, user, tool) before it, with the model turns' positions but not their text. The
environment is deterministic given the model's actions, so two episodes with the same history
saw the same world; what the model wrote in between only matters through what the environment
answered. Turns are hashed (blake2b over length-prefixed ids), so comparing is cheap and the
key never holds a sender's text.

The reward of an episode arrives after its last model turn, so turn t of T has return-to-go
``discount ** (T - 1 - t) * reward``: a turn nearer a success earns more, and an episode that
solves the task in fewer turns beats a slower one from the same state.
"""

from __future__ import annotations

import enum
import hashlib
from collections import defaultdict
from collections.abc import Hashable, Sequence

from genrl_swarm.paradigms.agents.bodies import Turn


class Advantage(enum.Enum):
    """What a model turn's advantage is made of (``learner.advantage``)."""

    EPISODE = "episode"  # its episode's, within the task group (GRPO)
    STEP = "step"  # its step group's (GiGPO's step term alone)
    BOTH = "both"  # episode + step_weight * step (GiGPO)


def anchor_keys(turns: Sequence[Turn]) -> list[bytes]:
    """One key per assistant turn: the hash of the observation history before it."""
    history = hashlib.blake2b(digest_size=16)
    keys: list[bytes] = []
    for turn in turns:
        if turn.role == "assistant":
            keys.append(history.digest())
            history.update(b"A")  # a model turn happened here; its text is not part of the state
            continue
        history.update(turn.role.encode() + len(turn.token_ids).to_bytes(4, "little"))
        history.update(b"".join(i.to_bytes(4, "little") for i in turn.token_ids))
    return keys


def returns_to_go(reward: float, turns: int, discount: float) -> list[float]:
    """Each of ``turns`` model turns' discounted return when ``reward`` follows the last one."""
    return [reward * discount ** (turns - 1 - t) for t in range(turns)]


def step_advantages(returns: Sequence[float], groups: Sequence[Hashable], scale: bool = True, eps: float = 1e-4) -> list[float]:
    """Each turn's return minus its step group's mean, over the group's (population) std when
    ``scale``; a turn alone in its state has nothing to be compared with and gets 0."""
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    out = [0.0] * len(returns)
    for idx in members.values():
        values = [returns[i] for i in idx]
        mean = sum(values) / len(values)
        std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
        for i in idx:
            out[i] = (returns[i] - mean) / (std + eps if scale else 1.0)
    return out


def combine(episode: Sequence[float], step: Sequence[float], mode: Advantage, step_weight: float) -> list[float]:
    """Per turn: the episode term, the step term, or GiGPO's ``episode + step_weight * step``."""
    if mode is Advantage.EPISODE:
        return list(episode)
    if mode is Advantage.STEP:
        return list(step)
    return [e + step_weight * s for e, s in zip(episode, step, strict=True)]
