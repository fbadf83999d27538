"""Off-policy correction: importance weights by hand, and a learner that uses the behaviour
log-probs it receives (tests fail when the correction is ignored)."""

from __future__ import annotations

import math
from typing import Any

import pytest

pytest.importorskip("torch")
import torch

from genrl_swarm.core import GameState, Rollout, RoundRewards, ScoredRollout, Task, TokenRollout, TokenSample
from genrl_swarm.paradigms.lm.grpo_loss import grpo_loss, importance_weights, k3_kl
from genrl_swarm.paradigms.lm.learner import GRPOLearner, Sample
from genrl_swarm.paradigms.lm.policy import LMPolicy

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
LOG = math.log


def test_importance_weights_by_hand() -> None:
    prox, behaviour = torch.log(torch.tensor([[0.5, 0.9, 0.3]])), torch.log(torch.tensor([[0.1, 0.9, 0.4]]))
    for mode, weight, keep in [
        ("none", [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]),
        ("tis", [2.0, 1.0, 0.75], [1.0, 1.0, 1.0]),  # raw 5 is truncated at the cap
        ("decoupled", [0.0, 1.0, 0.75], [0.0, 1.0, 1.0]),  # raw 5 exceeds the cap: masked
    ]:
        w, k = importance_weights(prox, behaviour, mode, 2.0)  # type: ignore[arg-type]
        assert w[0].tolist() == pytest.approx(weight, rel=1e-5), mode
        assert k[0].tolist() == keep, mode
    with pytest.raises(ValueError, match="off_policy"):
        importance_weights(prox, behaviour, "clip", 2.0)  # type: ignore[arg-type]


def loss_and_grad(mode: str, behaviour: torch.Tensor, cap: float = 2.0) -> tuple[float, list[float], dict[str, float]]:
    """Ratio 1 (logp = proximal), advantage +1, two tokens of one sequence."""
    prox = torch.log(torch.tensor([[0.5, 0.9]]))
    logp = prox.clone().requires_grad_()
    loss, stats = grpo_loss(logp, prox, torch.tensor([1.0]), torch.ones(1, 2), behaviour_logp=behaviour, off_policy=mode, is_cap=cap)  # type: ignore[arg-type]
    loss.backward()
    assert logp.grad is not None
    return float(loss), logp.grad[0].tolist(), stats


def test_surrogate_weights_by_hand() -> None:
    far = torch.log(torch.tensor([[0.1, 0.9]]))  # weights 5 and 1
    # d loss / d logp_t = -w_t * ratio * A / N with N = 2 tokens; loss = -sum(w_t) / 2
    assert loss_and_grad("none", far)[:2] == (pytest.approx(-1.0), pytest.approx([-0.5, -0.5]))
    assert loss_and_grad("tis", far)[:2] == (pytest.approx(-1.5), pytest.approx([-1.0, -0.5]))
    assert loss_and_grad("decoupled", far)[:2] == (pytest.approx(-0.5), pytest.approx([0.0, -0.5]))
    assert loss_and_grad("decoupled", far, cap=6.0)[:2] == (pytest.approx(-3.0), pytest.approx([-2.5, -0.5]))
    stats = loss_and_grad("none", far)[2]
    assert stats["is_weight_mean"] == pytest.approx(3.0) and stats["is_weight_max"] == pytest.approx(5.0)
    assert stats["is_truncated_frac"] == 0.5
    assert stats["behaviour_kl"] == pytest.approx((5 - LOG(5) - 1) / 2)  # k3 of behaviour vs proximal, per token


def test_tis_equals_none_when_behaviour_is_the_proximal_policy() -> None:
    same = torch.log(torch.tensor([[0.5, 0.9]]))
    none, tis, dec = (loss_and_grad(m, same) for m in ("none", "tis", "decoupled"))
    for other in (tis, dec):
        assert other[0] == pytest.approx(none[0]) and other[1] == pytest.approx(none[1])
    assert tis[2]["behaviour_kl"] == pytest.approx(0.0, abs=1e-7) and tis[2]["is_weight_mean"] == pytest.approx(1.0)


def test_clipping_is_around_the_proximal_policy_not_the_behaviour() -> None:
    """Decoupled PPO: the trust region is the learner's own; the behaviour only reweighs."""
    prox = torch.zeros(1, 1)
    logp = torch.log(torch.tensor([[1.5]])).requires_grad_()  # ratio 1.5 to the proximal: clipped
    behaviour = torch.log(torch.tensor([[0.8]]))  # raw weight 1.25
    loss, stats = grpo_loss(logp, prox, torch.tensor([1.0]), torch.ones(1, 1), behaviour_logp=behaviour, off_policy="decoupled")
    assert float(loss) == pytest.approx(-1.28 * 1.25) and stats["clip_frac"] == 1.0
    assert float(k3_kl(behaviour, prox)) == pytest.approx(1.25 - LOG(1.25) - 1)


# --------------------------------------------------------------------------- the learner
def policy(seed: int = 1, **sampling: Any) -> LMPolicy:
    return LMPolicy("tiny-random", {"num_generations": 4, "max_new_tokens": 5} | sampling, seed=seed)


def own_logprobs(learner: GRPOLearner, body: TokenRollout) -> list[list[float]]:
    """The learner's (proximal) log-probs of each sample, one sequence per forward."""
    out = []
    for s in body.samples:
        batch = learner.collate([Sample(body.prompt_ids, s.completion_ids, s.logprobs, 1.0)])
        with torch.no_grad():
            out.append(learner.token_logps(learner.model, batch)[0].tolist())
    return out


def gradient(mode: str, shift: tuple[float, float], sender: str = "me", bound: bool = True) -> tuple[torch.Tensor, dict[str, float]]:
    """One update on two completions (rewards 1, 0) whose behaviour log-probs are the learner's
    own minus ``shift`` (0: on-policy; 5: a behaviour policy far less likely than ours), sent by
    ``sender``: this peer's own (stale) rollout by default, whose weights keep the ``is_cap``
    (a swarm sender's are capped lower: tests/test_trust_v3_flood.py)."""
    p = policy()
    # The plain per-sequence path: its log-probs are bitwise those of token_logps (own_logprobs),
    # which the 1e-8 tolerances below rely on; the shared-prefix path is checked against it in
    # tests/test_grpo_speed.py.
    learner = GRPOLearner(
        p,
        {
            "off_policy": mode,
            "is_cap": 2.0,
            "max_grad_norm": 1e9,
            "learning_rate": 0.0,
            "num_external": 1,
            "shared_prefix": False,
            "swarm_weight_bound": bound,
        },
    )
    inp = Task.create("Calculate 3 + 4.").input(0)
    body = TokenRollout(inp.task_id, inp.digest, tuple(p.prompt_ids(inp)),
                        (TokenSample((40, 41, 42), (-1.0,) * 3, "length"), TokenSample((50, 51, 52), (-1.0,) * 3, "length")),
                        0, p.fingerprint)  # fmt: skip
    mine = own_logprobs(learner, body)
    samples = tuple(TokenSample(s.completion_ids, tuple(x - d for x in lp), "length") for s, lp, d in zip(body.samples, mine, shift))
    body = TokenRollout(body.task_id, body.input_digest, body.prompt_ids, samples, 0, body.tokenizer)
    metrics = learner.train(GameState(0, "me"), RoundRewards(0, (ScoredRollout(Rollout(sender, 0, 0, body), (1.0, 0.0)),)))
    return torch.cat([w.grad.flatten() for w in p.model.parameters() if w.grad is not None]), metrics


def test_learner_gradient_uses_the_behaviour_logprobs() -> None:
    g = {m: gradient(m, (0.0, 5.0)) for m in ("none", "tis", "decoupled")}  # second completion: weight e^5 > cap
    none, tis, dec = (g[m][0] for m in ("none", "tis", "decoupled"))
    assert not torch.allclose(tis, none, rtol=1e-3, atol=1e-8)  # fails when the correction is ignored
    assert not torch.allclose(dec, none, rtol=1e-3, atol=1e-8)
    # Linear in the weights: none = g1 + g2, tis = g1 + 2 g2 (truncated), decoupled = g1 (masked).
    assert torch.allclose(tis - none, none - dec, rtol=1e-3, atol=1e-6)
    assert g["tis"][1]["train/is_truncated_frac"] == pytest.approx(0.5)
    assert g["none"][1]["train/is_weight_max"] == pytest.approx(math.exp(5), rel=1e-3)


def test_learner_gradient_equals_none_on_policy() -> None:
    none, tis, dec = (gradient(m, (0.0, 0.0)) for m in ("none", "tis", "decoupled"))
    assert torch.allclose(tis[0], none[0], rtol=1e-4, atol=1e-8) and torch.allclose(dec[0], none[0], rtol=1e-4, atol=1e-8)
    assert tis[1]["train/is_weight_mean"] == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("temperature", [0.6, 1.0])
def test_sampled_behaviour_logprobs_match_the_learners_own(temperature: float) -> None:
    """On-policy, the sampler's log-probs are the learner's proximal log-probs: weight 1, no KL
    (fails if either side forgets the temperature)."""
    p = policy(temperature=temperature)  # the tiny model is peaked: temperature matters
    learner = GRPOLearner(p, {"learning_rate": 0.0})
    inputs = [Task.create(f"Calculate {i} * 7.").input(0) for i in range(3)]
    bodies = p.act(inputs, 0)
    scored = tuple(ScoredRollout(Rollout("me", 0, 0, b), (1.0, 0.0, 0.0, 1.0)) for b in bodies)
    metrics = learner.train(GameState(0, "me"), RoundRewards(0, scored))
    assert metrics["train/is_weight_mean"] == pytest.approx(1.0, abs=1e-3)
    assert metrics["train/behaviour_kl"] == pytest.approx(0.0, abs=1e-5)
    assert metrics["train/is_truncated_frac"] == 0.0


@pytest.mark.parametrize("epochs, forwards", [(1, 1), (2, 3)])
def test_proximal_logprobs_need_a_forward_only_for_several_epochs(epochs: int, forwards: int) -> None:
    p = policy()
    # Counts full-model forwards: the plain path (the shared-prefix one is counted in test_grpo_speed.py).
    learner = GRPOLearner(p, {"num_epochs": epochs, "micro_batch_size": 64, "learning_rate": 1e-2, "shared_prefix": False})
    calls: list[int] = []
    hook = p.model.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        (body,) = p.act([Task.create("q").input(0)], 0)
        calls.clear()
        learner.train(GameState(0, "me"), RoundRewards(0, (ScoredRollout(Rollout("me", 0, 0, body), (1.0, 0.0, 0.0, 0.0)),)))
    finally:
        hook.remove()
    assert len(calls) == forwards and learner.steps == epochs and learner.version == 1
