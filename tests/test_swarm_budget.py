"""The swarm copies of one prefix-and-token edge share one weight budget (``lm/swarm_budget.py``,
issue 42): k copies of one answer, with any tails, from any number of sender ids, weigh together
min(k, n * p), p the receiver's own probability, not k * min(1, n * p)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import pytest

pytest.importorskip("torch")
import torch

from genrl_swarm.core import GameState, Rollout, RoundRewards, ScoredRollout, Task, TokenRollout, TokenSample
from genrl_swarm.paradigms.lm.grpo_loss import importance_weights
from genrl_swarm.paradigms.lm.learner import GRPOLearner, Sample, mark_swarm, share_edges
from genrl_swarm.paradigms.lm.policy import LMPolicy
from genrl_swarm.paradigms.lm.swarm_budget import edge_copies

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
DECOY = 40


def test_edge_copies_count_the_rows_through_each_prefix_and_token() -> None:
    rows = [((1, 2), (5, 6, 7)), ((1, 2), (5, 6, 8)), ((1, 2), (5, 9)), ((1, 3), (5, 6)), ((1, 2), (4,)), ((1, 2), ())]
    assert edge_copies(rows) == [(3, 2, 1), (3, 2, 1), (3, 1), (1, 1), (1,), ()]  # another prompt is another root


def test_copies_share_their_edges_budget_in_the_loss_weights() -> None:
    """Two copies of a first token the receiver draws with p = 0.1 (n = 4): each 0.2, together
    0.4 = n * p, what one copy weighs alone; a likely one (p = 0.5) 1 each, together 2 = n * p."""
    prox = torch.log(torch.tensor([[0.1, 0.5], [0.1, 0.5], [0.5, 0.5]]))
    copies, swarm = torch.tensor([[2.0, 1.0], [2.0, 1.0], [2.0, 1.0]]), torch.ones(3)
    weight, _ = importance_weights(prox, torch.zeros(3, 2), "tis", 2.0, swarm=swarm, draws=4.0 / copies)
    assert weight.flatten().tolist() == pytest.approx([0.2, 1.0, 0.2, 1.0, 1.0, 1.0])
    off = importance_weights(prox, torch.zeros(3, 2), "tis", 2.0, swarm=swarm, draws=math.inf / copies)[0]
    assert off.tolist() == [[1.0, 1.0]] * 3  # grpo.swarm_weight_bound: false


def test_own_rows_are_not_counted() -> None:
    own = Sample((1,), (DECOY, 7), (-1.0, -1.0), 1.0)
    theirs = [Sample((1,), (DECOY, t), (-1.0, -1.0), 1.0, swarm=True) for t in (8, 9)]
    shared = share_edges([own, *theirs])
    assert shared[0].copies == () and [s.copies for s in shared[1:]] == [(2, 1), (2, 1)]


def test_copies_without_advantage_do_not_dilute_an_honest_copy() -> None:
    """A flooder's zero-reward copies of an honest answer's prefix (advantage 0 against this
    peer's baseline) would share its edge's budget and cut its weight (0.689 -> 0.069 with 9 in a
    hostile review); they move nothing, so they are not counted."""
    honest = Sample((1,), (DECOY, 7), (-1.0, -1.0), 1.0, swarm=True)
    diluters = [Sample((1,), (DECOY, 7, t), (-1.0,) * 3, 0.0, swarm=True) for t in range(9)]
    shared = share_edges([honest, *diluters])
    assert shared[0].copies == (1, 1) and all(s.copies == () for s in shared[1:])
    pair = share_edges([honest, dataclasses.replace(honest, completion_ids=(DECOY, 8))])
    assert [s.copies for s in pair] == [(2, 1), (2, 1)]  # copies that move something still share


# --------------------------------------------------------------------------- Sybils, in the learner
def decoys(ids: int, per_id: int = 3) -> tuple[GRPOLearner, RoundRewards]:
    """This peer's own group for a prompt (all zero reward) and, from each of ``ids`` sender ids,
    ``per_id`` completions starting with the decoy, each with a tail of its own (no two bodies
    alike, no repeat), scored 0.5 by the receiver, and one zero-reward completion (a group of
    equal rewards is not informative: not selected)."""
    policy = LMPolicy("tiny-random", {"num_generations": 4, "max_new_tokens": 3}, seed=1)
    learner = GRPOLearner(policy, {"num_external": 12, "learning_rate": 0.0, "max_grad_norm": 1e9}, seed=0)
    inp = Task.create("Calculate 3 + 4.").input(0)
    prompt = tuple(policy.prompt_ids(inp))

    def body(completions: list[tuple[int, ...]]) -> TokenRollout:
        return TokenRollout(inp.task_id, inp.digest, prompt, tuple(TokenSample(c, (-30.0,) * len(c), "length") for c in completions), 0,
                            policy.fingerprint)  # fmt: skip

    own = ScoredRollout(Rollout("me", 0, 0, body([(50, 51, 52), (60, 61, 62), (70, 71, 72), (80, 81, 82)])), (0.0,) * 4)
    sent = [ScoredRollout(Rollout(f"sybil-{i}", 0, 0, body([*((DECOY, 100 + 10 * i + j, 200 + j) for j in range(per_id)), (90, 91, 92)])),
                          (0.5,) * per_id + (0.0,)) for i in range(ids)]  # fmt: skip
    return learner, RoundRewards(0, (own, *sent))


def swarm_rows(learner: GRPOLearner, rewards: RoundRewards) -> list[Sample]:
    """The rows ``learner`` trains on from the swarm, with their shares of the edges' budgets."""
    state = GameState(0, "me")
    chosen = learner.select(state, rewards)
    return [s for s in learner.budget(mark_swarm(learner.samples(state, chosen), chosen, "me")) if s.swarm]


def first_token_weight(ids: int) -> tuple[float, float]:
    """(what the swarm's decoy first tokens weigh together, n * the receiver's p of the decoy)."""
    learner, rewards = decoys(ids)
    rows = [r for r in swarm_rows(learner, rewards) if r.completion_ids[0] == DECOY]
    assert len(rows) == 3 * ids
    batch = learner.collate(rows)
    assert batch.copies is not None
    with torch.no_grad():
        prox = learner.token_logps(learner.model, batch)
    draws = learner.swarm_draws(GameState(0, "me")) / batch.copies
    weight, _ = importance_weights(prox, batch.behaviour_logp, "tis", 2.0, swarm=batch.swarm, draws=draws)
    first = batch.width - 3  # every completion is 3 tokens, right-aligned
    return float(weight[:, first].sum()), 4 * float(prox[0, first].exp())


def test_the_same_decoys_from_three_ids_weigh_no_more_than_from_one() -> None:
    one, three = first_token_weight(1), first_token_weight(3)
    assert one[0] == pytest.approx(min(3, one[1]), rel=1e-4)  # the edge's budget: n * p, shared by its 3 copies
    assert three[0] <= one[0] * (1 + 1e-4), (one, three)  # 9 copies from 3 ids: no more


class PerCopyLearner(GRPOLearner):
    """The rule before the budget: every copy weighs min(1, n * p) by itself."""

    def budget(self, samples: Sequence[Sample]) -> list[Sample]:
        return list(samples)


def gradient(ids: int, per_id: int = 3, cls: type[GRPOLearner] = GRPOLearner, **grpo: object) -> torch.Tensor:
    """The gradient of one update on ``decoys(ids, per_id)`` by a ``cls`` learner."""
    learner, rewards = decoys(ids, per_id)
    learner = cls(learner.policy, dataclasses.replace(learner.cfg, **grpo), seed=0)  # type: ignore[arg-type]
    learner.train(GameState(0, "me"), rewards)
    return torch.cat([w.grad.flatten() for w in learner.model.parameters() if w.grad is not None])


def test_the_shared_prefix_update_and_the_plain_one_share_the_same_budgets() -> None:
    """Chunks (completions left-aligned) and plain batches (right-aligned) carry the copies alike."""
    assert torch.allclose(gradient(3, shared_prefix=True), gradient(3, shared_prefix=False), rtol=1e-3, atol=1e-7)


def test_the_budget_changes_the_update_only_where_copies_share_an_edge() -> None:
    assert not torch.allclose(gradient(3), gradient(3, cls=PerCopyLearner), rtol=1e-3, atol=1e-7)
    assert torch.equal(gradient(1, per_id=1), gradient(1, per_id=1, cls=PerCopyLearner))  # a lone copy: min(1, n * p)
