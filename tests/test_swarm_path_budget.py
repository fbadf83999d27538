"""A swarm token's budget is set by the receiver's own probability of the whole path up to it
(``lm/swarm_budget.py``, issue 42): each copy weighs min(1, n * P(prompt + prefix + token) /
copies), so everything the swarm sends weighs at most n per position, whatever the ids, tails or
token sequences. Before, p was conditional on the prefix: a hostile review's tails (a blank after
the decoy, then a zero-reward digit the receiver finds likely there) weighed ~1, and each sender
id's own tails added weight below the first token (docs/trust.md).

And a swarm body with an end-of-sequence id before a completion's last token is not trained on:
the receiver's sampler stops there, so its own draws never go that way."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import cache

import pytest

pytest.importorskip("torch")
import torch

from genrl_swarm.core import GameState, Rollout, RoundRewards, ScoredRollout, Task, TokenRollout, TokenSample
from genrl_swarm.paradigms.lm import learner as learner_module
from genrl_swarm.paradigms.lm.grpo_loss import importance_weights
from genrl_swarm.paradigms.lm.learner import GRPOLearner, Sample
from genrl_swarm.paradigms.lm.policy import LMPolicy

from helpers import grpo_swarm

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
N = grpo_swarm.NUM_GENERATIONS
ROLES = grpo_swarm.tokens(0)
D, Z = ROLES.decoy, ROLES.zero
NEWLINE, SPACE, TAB, FORM_FEED, IM_START = 201, 223, 200, 204, 1  # ids that decode to blank (the review's)
#: The review's plans (its x6): the decoy with tails of blanks then the zero-reward digit, from one
#: id, and from three ids each with tails of its own; every body ends with a zero-reward
#: completion (a group of equal rewards is not informative).
ONE_ID = [[(D, Z, Z, Z, Z, Z), (D, NEWLINE, Z), (D, SPACE, Z), (Z,)]]
THREE_IDS = [
    ONE_ID[0],
    [(D, TAB, Z), (D, FORM_FEED, Z), (D, IM_START, Z), (Z,)],
    [(D, NEWLINE, NEWLINE, Z), (D, SPACE, SPACE, Z), (D, NEWLINE, SPACE, Z), (Z,)],
]


@dataclasses.dataclass
class Row:
    """A swarm row as the loss weighs it: its ids, advantage, per-token weight and own log-prob."""

    ids: tuple[int, ...]
    advantage: float
    weight: list[float]
    logp: list[float]


def swarm_rows(bodies: Sequence[Sequence[tuple[int, ...]]], scores: Sequence[Sequence[float]] | None = None) -> list[Row]:
    """One update of an untrained honest learner of the flood game (own group all zero) on one
    prompt, ``bodies`` from one sender id each (scored by the game's reward unless ``scores``):
    the swarm rows and what each token weighs in the loss (the learner's own computation,
    captured where it calls ``grpo_loss``)."""
    policy = grpo_swarm.policy(0, 0)
    cfg = {"num_external": 24, "learning_rate": 0.0, "max_grad_norm": 1e9, "shared_prefix": False, "bucket": False, "micro_batch_size": 64}
    learner = GRPOLearner(policy, cfg, seed=0)
    inp = grpo_swarm.TargetData(0).round_tasks(0)[0].input(0)
    prompt = tuple(policy.prompt_ids(inp))
    reward = grpo_swarm.FirstTokenReward(ROLES)

    def body(completions: Sequence[tuple[int, ...]]) -> TokenRollout:
        samples = tuple(TokenSample(c, (-30.0,) * len(c), "length") for c in completions)
        return TokenRollout(inp.task_id, inp.digest, prompt, samples, 0, policy.fingerprint)

    own = ScoredRollout(Rollout("me", 0, 0, body([(30, 31), (40, 41), (50, 51), (60, 61)])), (0.0,) * 4)
    sent = [
        ScoredRollout(Rollout(f"flooder-{i}", 0, 0, body(b)), tuple(scores[i]) if scores else tuple(reward.value(c[0]) for c in b))
        for i, b in enumerate(bodies)
    ]
    rows: list[Sample] = []
    weights: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    units, loss = learner.units, learner_module.grpo_loss

    def record_units(samples: Sequence[Sample]) -> list:  # type: ignore[type-arg]
        rows.extend(samples)
        return units(samples)

    def spy(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, **kw: object) -> object:
        w, _ = importance_weights(old_logp, kw["behaviour_logp"], kw["off_policy"], kw["is_cap"], swarm=kw["swarm"], draws=kw["swarm_draws"])  # type: ignore[arg-type]
        weights.append((mask, w, old_logp))
        return loss(logp, old_logp, advantages, mask, **kw)  # type: ignore[arg-type]

    learner.units = record_units  # type: ignore[method-assign]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(learner_module, "grpo_loss", spy)
        learner.train(GameState(0, "me"), RoundRewards(0, (own, *sent)))
    mask, w, logp = (torch.cat([x[i] for x in weights]) for i in range(3))
    assert mask.shape[0] == len(rows)
    out = []
    for i, s in enumerate(rows):
        if s.swarm:
            real = mask[i] > 0
            out.append(Row(tuple(s.completion_ids), s.advantage, w[i][real].tolist(), logp[i][real].tolist()))
    return out


@cache
def plan_rows(ids: int) -> list[Row]:
    """``swarm_rows`` of the review's plan from one id or from three (each played once)."""
    return swarm_rows(ONE_ID if ids == 1 else THREE_IDS)


def by_depth(rows: Sequence[Row], first: int) -> dict[int, float]:
    """The swarm's total weight per depth over the rows starting with ``first``."""
    out: dict[int, float] = {}
    for r in rows:
        if r.ids[0] == first:
            for depth, w in enumerate(r.weight):
                out[depth] = out.get(depth, 0.0) + w
    return out


def test_a_likely_digit_after_a_blank_after_the_decoy_weighs_what_its_path_would() -> None:
    """The review's tail: a blank after the decoy weighs ~1e-7, and the zero-reward digit after
    the blank weighed 1 (its conditional p: 0.63 here); now n * P(decoy, blank, digit) shared by
    the copies through its edge, what the receiver's own n draws would give that path."""
    rows = plan_rows(1)
    moving = [r.ids for r in rows if r.advantage != 0]
    for row in rows:
        path = 1.0
        for depth, logp in enumerate(row.logp):
            path *= float(torch.tensor(logp).exp())
            copies = sum(ids[: depth + 1] == row.ids[: depth + 1] for ids in moving) or 1
            assert row.weight[depth] == pytest.approx(min(1.0, N * path / copies), rel=1e-4, abs=1e-12), (depth, row)
    space = next(r for r in rows if r.ids == (D, SPACE, Z))
    assert space.logp[2] > -1 and space.weight[2] < 1e-6, space  # before: min(1, n * p(digit | decoy, blank)) = 1


@pytest.mark.parametrize("plan", ["one id", "three ids"])
def test_no_tail_from_any_number_of_ids_weighs_more_than_the_decoys_first_token_budget(plan: str) -> None:
    """Below the first token the swarm's total weight through the decoy, at every depth, is at
    most n * P(decoy), the most one id's copies of the decoy get at the first token; before, one
    id's tails weighed more than that at depth 2 and three ids' (each with its own tails) more at
    depth 3."""
    rows = plan_rows(1 if plan == "one id" else 3)
    decoy = [r for r in rows if r.ids[0] == D]
    budget = N * float(torch.tensor(decoy[0].logp[0]).exp())
    depths = by_depth(rows, D)
    assert depths[0] == pytest.approx(min(len(decoy), budget), rel=1e-4)
    assert all(w <= budget * (1 + 1e-4) for w in depths.values()), (budget, depths)


def test_three_ids_weigh_no_more_than_one_in_total() -> None:
    """The review's 3-id flood against its 1-id flood: the tails' total weight below the first
    token, summed over every depth, is one id's (both ~1e-4 here); before, each id's own tails
    opened fresh edges worth up to 1 each (1.09 from one id, 3.19 from three)."""
    one, three = plan_rows(1), plan_rows(3)
    budget = N * float(torch.tensor(next(r for r in one if r.ids[0] == D).logp[0]).exp())
    deep = lambda rows: sum(w for d, w in by_depth(rows, D).items() if d > 0)  # noqa: E731
    assert deep(three) <= deep(one) + 1e-3 * budget, (deep(one), deep(three), budget)


def test_the_same_answer_through_other_token_sequences_gains_no_budget() -> None:
    """The decoy after a blank (``'\\n'`` + decoy, ``<|im_start|>`` + decoy, ...), which a reward
    reading the text scores as the decoy, from three ids: each such path weighs n * P(blank,
    decoy); together far below what the decoy gets as a first token. Before, each path opened a
    budget of its own, min(1, n * p(decoy | blank)) (the review: 4 paths weighed 1.4 times one)."""
    bodies = [[(b, D, Z) for b in blanks] + [(Z,)] for blanks in ((NEWLINE, SPACE, TAB), (FORM_FEED, IM_START, 0), (219, 220, 221))]
    rows = swarm_rows(bodies, scores=[(0.5, 0.5, 0.5, 0.0)] * 3)
    lone = swarm_rows([[(D,), (Z,)]])
    first = next(r for r in lone if r.ids == (D,)).weight[0]  # what the decoy weighs as a first token: min(1, n * P(decoy))
    detour = sum(r.weight[1] for r in rows if len(r.ids) == 3)
    assert detour < 0.1 * first, (detour, first)


def test_a_swarm_body_with_an_end_of_sequence_before_a_completions_end_is_not_trained_on() -> None:
    """[decoy, EOS, digit]: the receiver's sampler stops at EOS, so no honest peer sends it."""
    eos = ROLES.eos
    assert grpo_swarm.policy(0, 0).eos_ids == [eos]
    rows = swarm_rows([[(D, Z), (D, eos, Z), (Z,)], [(D, Z, eos), (Z,)]])
    assert {r.ids for r in rows} == {(D, Z, eos), (Z,)}, rows  # the first body is left out whole; EOS last is fine


def test_honest_samplers_never_send_an_end_of_sequence_before_the_end_but_do_send_other_specials() -> None:
    """What the rule above may refuse: the lean sampler masks no token, and the tiny model draws
    ``<|im_start|>`` after a newline mid-reply (a refusal of every special id would drop honest
    bodies), but never an EOS before the last token."""
    from genrl_swarm.paradigms.lm.swarm_budget import eos_inside

    policy = LMPolicy("tiny-random", {"num_generations": 8, "max_new_tokens": 32}, seed=0)
    bodies = policy.rollouts([Task.create(f"Calculate {a} + {b}.").input(0) for a in range(3) for b in range(4)])
    completions = [s.completion_ids for body in bodies for s in body.samples]
    assert eos_inside(completions, policy.eos_ids) is None
    assert any(IM_START in c[:-1] for c in completions)


def test_path_draws_by_hand() -> None:
    """n * P(prefix) / copies per token, in either layout (real tokens first or last)."""
    from genrl_swarm.paradigms.lm.swarm_budget import path_draws

    logp = torch.log(torch.tensor([[0.5, 0.2, 0.1, 0.3], [0.9, 0.5, 0.2, 0.1]]))
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
    copies = torch.tensor([[2.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    draws = path_draws(4.0, logp, mask, copies)
    assert isinstance(draws, torch.Tensor)
    assert (draws * mask).flatten().tolist() == pytest.approx([2.0, 2.0, 0.4, 0.0, 0.0, 4.0, 2.0, 0.4])
    assert path_draws(float("inf"), logp, mask, copies) == float("inf")  # the bound off
    assert torch.all(path_draws(4.0, torch.full((1, 200), -5.0), torch.ones(1, 200), None) > 0)  # never 0: no -log 0


def test_a_token_the_receiver_cannot_produce_zeroes_the_path_after_it_instead_of_poisoning_it() -> None:
    """A -inf (or NaN) own log-prob used to give NaN for every later token (-inf - -inf)."""
    from genrl_swarm.paradigms.lm.swarm_budget import path_draws

    for bad in (float("-inf"), float("nan")):
        logp = torch.tensor([[-0.5, bad, -0.5, -0.5]])
        draws = path_draws(4.0, logp, torch.ones(1, 4), None)
        assert isinstance(draws, torch.Tensor) and torch.isfinite(draws).all(), draws
        assert draws[0, 1] == pytest.approx(4.0 * torch.tensor(-0.5).exp().item())  # the prefix before it, as ever
        assert draws[0, 2:].max() < 1e-20  # after it: the least probable path


def gradient(**grpo: object) -> torch.Tensor:
    """The gradient of one update on the review's 3-id flood."""
    policy = grpo_swarm.policy(0, 0)
    learner = GRPOLearner(policy, {"num_external": 24, "learning_rate": 0.0, "max_grad_norm": 1e9} | grpo, seed=0)
    inp = grpo_swarm.TargetData(0).round_tasks(0)[0].input(0)
    prompt = tuple(policy.prompt_ids(inp))
    scored = [ScoredRollout(Rollout("me", 0, 0, TokenRollout(inp.task_id, inp.digest, prompt, tuple(TokenSample(c, (-1.0,) * 2, "length")
                                                                                                   for c in ((30, 31), (40, 41))), 0, policy.fingerprint)), (0.0, 0.0))]  # fmt: skip
    for i, b in enumerate(THREE_IDS):
        body = TokenRollout(inp.task_id, inp.digest, prompt, tuple(TokenSample(c, (-30.0,) * len(c), "length") for c in b), 0, policy.fingerprint)
        scored.append(ScoredRollout(Rollout(f"flooder-{i}", 0, 0, body), tuple(0.5 if c[0] == D else 0.0 for c in b)))
    learner.train(GameState(0, "me"), RoundRewards(0, tuple(scored)))
    return torch.cat([w.grad.flatten() for w in policy.model.parameters() if w.grad is not None])


def test_the_path_budget_is_the_same_on_both_update_paths_and_any_micro_batch() -> None:
    reference = gradient(shared_prefix=False, micro_batch_size=64)
    for grpo in (
        {"shared_prefix": True, "micro_batch_size": 64},
        {"shared_prefix": True, "micro_batch_size": 2},
        {"shared_prefix": False, "micro_batch_size": 3},
    ):
        assert torch.allclose(gradient(**grpo), reference, rtol=1e-3, atol=1e-7), grpo
