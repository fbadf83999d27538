"""GRPO on a batch of buffered groups: the synchronous GRPOLearner, fed from the buffer.

The learner actor trains through the same ``GRPOLearner.train`` as the synchronous loop (so
with ``max_staleness=0`` both compute the same update from the same groups); the only addition
is a per-group weight on the advantages, which ``stale: downweight`` uses. No Ray here."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from genrl_swarm.core import GameState, Rollout, RoundRewards, ScoredRollout
from genrl_swarm.paradigms.lm.async_grpo.buffer import Group
from genrl_swarm.paradigms.lm.learner import GRPOConfig, GRPOLearner, Sample
from genrl_swarm.paradigms.lm.policy import LMPolicy

#: The peer id the learner's own groups carry; swarm groups keep their sender's.
OWN = "self"


class WeightedGRPOLearner(GRPOLearner):
    """GRPOLearner whose groups may carry a weight < 1 (stale ones, when down-weighted)."""

    def __init__(self, policy: LMPolicy, grpo: GRPOConfig | Mapping[str, Any] | None = None, seed: int = 0) -> None:
        super().__init__(policy, grpo, seed)
        self.group_weights: dict[int, float] = {}  # id(body) -> weight, for the batch in training

    def samples(self, state: GameState, chosen: Sequence[ScoredRollout]) -> list[Sample]:
        out = super().samples(state, chosen)
        if not self.group_weights:
            return out
        by_completion = {id(s.completion_ids): self.group_weights.get(id(sc.rollout.body), 1.0) for sc in chosen for s in sc.rollout.body.samples}
        return [dataclasses.replace(x, advantage=x.advantage * by_completion.get(id(x.completion_ids), 1.0)) for x in out]


def as_round(groups: Sequence[Group], version: int) -> tuple[GameState, RoundRewards]:
    """The groups as the (state, rewards) a GRPOLearner trains on: own groups under ``OWN``
    (all of them train, ``num_local`` permitting), swarm groups under their sender."""
    scored = tuple(ScoredRollout(Rollout(g.source if g.external else OWN, version, 0, g.body, g.texts), g.rewards) for g in groups)
    return GameState(version, OWN), RoundRewards(version, scored)


def train_groups(learner: WeightedGRPOLearner, groups: Sequence[Group], weights: Sequence[float]) -> dict[str, float]:
    """One update on ``groups``; ``weights`` scale each group's advantages."""
    state, rewards = as_round(groups, learner.version)
    learner.group_weights = {id(g.body): w for g, w in zip(groups, weights) if w != 1.0}
    try:
        return learner.train(state, rewards)
    finally:
        learner.group_weights = {}
