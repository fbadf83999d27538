"""GRPO/DAPO objective against hand-computed values."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

pytest.importorskip("torch")
import torch

from genrl_swarm.paradigms.lm.grpo_loss import clipped_surrogate, group_advantages, grpo_loss, k3_kl


def test_group_advantages_by_hand() -> None:
    (adv,) = group_advantages([torch.tensor([1.0, 0.0, 0.0, 1.0])])
    assert adv.tolist() == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-3)  # mean .5, std .5


def test_degenerate_group_has_zero_advantage() -> None:
    for scale in ("group", "batch", "none"):
        (adv,) = group_advantages([torch.tensor([0.7, 0.7, 0.7])], scale)  # type: ignore[arg-type]
        assert adv.abs().max() == 0


def test_batch_and_no_scaling() -> None:
    groups = [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0])]
    batch = group_advantages(groups, "batch")
    std = math.sqrt(0.1875)  # population std of [1, 0, 0, 0]
    assert batch[0].tolist() == pytest.approx([0.5 / std, -0.5 / std], rel=1e-3)
    assert batch[1].tolist() == [0.0, 0.0]
    assert group_advantages(groups, "none")[0].tolist() == [0.5, -0.5]


@pytest.mark.parametrize(
    "ratio, adv, objective, clipped",
    [
        (1.5, 1.0, 1.28, True),  # above 1 + eps_high with a positive advantage: capped
        (1.5, -1.0, -1.5, False),  # a bad action made likelier is never clipped (pessimistic bound)
        (0.5, 1.0, 0.5, False),
        (0.5, -1.0, -0.8, True),  # below 1 - eps_low with a negative advantage: capped
        (1.1, 1.0, 1.1, False),  # inside the trust region
        (1.28, 1.0, 1.28, False),  # exactly on the upper boundary
        (0.8, -1.0, -0.8, False),  # exactly on the lower boundary
    ],
)
def test_clip_boundaries(ratio: float, adv: float, objective: float, clipped: bool) -> None:
    old = torch.zeros(1, 1)
    obj, was_clipped = clipped_surrogate(torch.log(torch.tensor([[ratio]])), old, torch.tensor([adv]), 0.2, 0.28)
    assert float(obj) == pytest.approx(objective, rel=1e-5)
    assert bool(was_clipped) is clipped


def test_clipped_token_gets_no_gradient() -> None:
    logp = torch.log(torch.tensor([[1.5, 1.1]])).requires_grad_()
    loss, stats = grpo_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2))
    loss.backward()
    assert logp.grad is not None
    assert logp.grad[0, 0] == 0  # clipped
    assert float(logp.grad[0, 1]) == pytest.approx(-1.1 / 2)  # d(-ratio*A/N)/dlogp = -ratio*A/N
    assert stats["clip_frac"] == 0.5 and stats["tokens"] == 2


def test_token_vs_sequence_aggregation() -> None:
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[0.0, 0.0, 1.0], [1.0, 1.0, 1.0]])  # lengths 1 and 3
    adv = torch.tensor([1.0, -1.0])
    token, _ = grpo_loss(logp, logp, adv, mask, aggregation="token")
    sequence, _ = grpo_loss(logp, logp, adv, mask, aggregation="sequence")
    assert float(token) == pytest.approx((-1 * 1 + 1 * 3) / 4)  # per token: -A
    assert float(sequence) == pytest.approx((-1 / 1 + 3 / 3) / 2)


def test_k3_kl_by_hand() -> None:
    value = k3_kl(torch.log(torch.tensor(0.5)), torch.log(torch.tensor(0.25)))
    assert float(value) == pytest.approx(0.5 - math.log(0.5) - 1)
    assert float(k3_kl(torch.tensor(-1.0), torch.tensor(-1.0))) == 0


def test_kl_term_added_with_beta() -> None:
    logp, ref = torch.log(torch.full((1, 1), 0.5)), torch.log(torch.full((1, 1), 0.25))
    loss, stats = grpo_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1), beta=0.1, ref_logp=ref)
    assert float(loss) == pytest.approx(0.1 * (0.5 - math.log(0.5) - 1))
    with pytest.raises(ValueError, match="reference"):
        grpo_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1), beta=0.1)


@pytest.mark.parametrize("off_policy", ["none", "tis", "decoupled"])
@pytest.mark.parametrize("aggregation", ["token", "sequence"])
def test_micro_batches_accumulate_to_the_full_batch(aggregation: str, off_policy: str) -> None:
    torch.manual_seed(0)
    logp, old = torch.randn(4, 5) * 0.1, torch.randn(4, 5) * 0.1
    behaviour = old - torch.rand(4, 5)  # weights in [1, e]: some truncated or masked at cap 2
    mask = (torch.rand(4, 5) > 0.3).float()
    mask[:, -1] = 1
    adv = torch.randn(4)
    opts: dict[str, Any] = {"aggregation": aggregation, "off_policy": off_policy}
    full, _ = grpo_loss(logp, old, adv, mask, behaviour_logp=behaviour, **opts)
    totals: dict[str, Any] = {"total_tokens": float(mask.sum()), "total_sequences": 4.0}
    parts = [
        grpo_loss(logp[i : i + 2], old[i : i + 2], adv[i : i + 2], mask[i : i + 2], behaviour_logp=behaviour[i : i + 2], **opts, **totals)[0]
        for i in (0, 2)
    ]
    assert float(sum(parts)) == pytest.approx(float(full), rel=1e-5)


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("learning_rate", -1e-6, ">= 0"), ("num_epochs", 0, ">= 1"), ("micro_batch_size", 0, ">= 1"),
        ("epsilon_low", -0.1, "in [0, 1)"), ("epsilon_low", 1.0, "in [0, 1)"), ("epsilon_high", -0.1, ">= 0"),
        ("num_local", -2, ">= -1"), ("num_external", -1, ">= 0"), ("off_policy", "clip", "none, tis or decoupled"),
        ("is_cap", 0.5, ">= 1"), ("scale_rewards", "std", "group, batch or none"), ("loss_aggregation", "mean", "token or sequence"),
    ],
)  # fmt: skip
def test_grpo_config_errors_name_the_field(field: str, value: Any, rule: str) -> None:
    from genrl_swarm.paradigms.lm.learner import GRPOConfig

    with pytest.raises(ValueError, match=f"^grpo.{field} must be {re.escape(rule)}, got {re.escape(repr(value))}$"):
        GRPOConfig(**{field: value})


def test_grpo_config_accepts_its_boundaries() -> None:
    from genrl_swarm.paradigms.lm.learner import GRPOConfig

    GRPOConfig(learning_rate=0.0, num_epochs=1, micro_batch_size=1, epsilon_low=0.0, epsilon_high=0.0, num_local=-1,
               num_external=0, off_policy="none", is_cap=1.0, scale_rewards="none", loss_aggregation="sequence")  # fmt: skip
    GRPOConfig(off_policy="decoupled", scale_rewards="batch", loss_aggregation="token")


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("num_generations", 0, ">= 1"), ("max_new_tokens", 0, "in [1, 65536]"), ("max_new_tokens", 65537, "in [1, 65536]"),
        ("temperature", 0.0, "> 0"), ("top_p", 0.0, "in (0, 1]"), ("top_p", 1.01, "in (0, 1]"), ("sampler", "vllm", "lean or hf"),
    ],
)  # fmt: skip
def test_sampling_config_errors_name_the_field(field: str, value: Any, rule: str) -> None:
    from genrl_swarm.paradigms.lm.policy import SamplingConfig

    with pytest.raises(ValueError, match=f"^sampling.{field} must be {re.escape(rule)}, got {re.escape(repr(value))}$"):
        SamplingConfig(**{field: value})


def test_sampling_config_accepts_its_boundaries() -> None:
    from genrl_swarm.paradigms.lm.policy import SamplingConfig

    SamplingConfig(num_generations=1, max_new_tokens=1, temperature=1e-3, top_p=1.0, sampler="hf")
    SamplingConfig(max_new_tokens=65536, top_p=1e-3, sampler="lean")


def test_empty_mask_gives_zero_loss_and_neutral_stats() -> None:
    logp = torch.zeros(2, 3)
    for aggregation in ("token", "sequence"):
        loss, stats = grpo_loss(logp, logp, torch.tensor([1.0, -1.0]), torch.zeros(2, 3), aggregation=aggregation)  # type: ignore[arg-type]
        assert float(loss) == 0.0 and stats["tokens"] == 0.0 and stats["is_weight_max"] == 1.0 and stats["clip_frac"] == 0.0


def test_log_weights_are_capped_against_overflow() -> None:
    from genrl_swarm.paradigms.lm.grpo_loss import MAX_LOG_WEIGHT, raw_weights

    w = raw_weights(torch.tensor([[100.0, 1.0]]), torch.tensor([[0.0, 0.0]]))
    assert w[0].tolist() == pytest.approx([math.exp(MAX_LOG_WEIGHT), math.e], rel=1e-6) and MAX_LOG_WEIGHT == 20.0


def test_a_weight_exactly_at_the_cap_is_kept_and_not_truncated() -> None:
    from genrl_swarm.paradigms.lm.grpo_loss import importance_weights, raw_weights

    prox, behaviour = torch.tensor([[math.log(2.0), math.log(4.0)]]), torch.zeros(1, 2)
    cap = float(raw_weights(prox, behaviour)[0, 0])  # 2, as float32 computes it
    weight, keep = importance_weights(prox, behaviour, "decoupled", cap)
    assert keep[0].tolist() == [1.0, 0.0] and weight[0, 0] == cap
    _, stats = grpo_loss(prox, prox, torch.tensor([1.0]), torch.ones(1, 2), behaviour_logp=behaviour, off_policy="tis", is_cap=cap)
    assert stats["is_truncated_frac"] == 0.5 and stats["is_weight_max"] == pytest.approx(4.0)


def test_sequence_aggregation_by_hand_with_totals() -> None:
    """Per sequence: mean over its tokens of -A * ratio (clipped) * w; then over the batch's sequences."""
    logp = torch.log(torch.tensor([[1.0, 1.5, 1.0], [1.0, 0.5, 1.0]]))
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    loss, stats = grpo_loss(logp, torch.zeros(2, 3), torch.tensor([2.0, -1.0]), mask, aggregation="sequence", total_sequences=4.0)
    first = -(1.28 * 2 + 1.0 * 2) / 2  # ratio 1.5 clipped at 1 + 0.28
    second = -(-1.0 - 0.8 - 1.0) / 3  # ratio 0.5 clipped at 1 - 0.2
    assert float(loss) == pytest.approx((first + second) / 4) and stats["clip_frac"] == pytest.approx(2 / 5)


def test_advantage_scales_divide_by_std_plus_eps_exactly() -> None:
    """Hand-computed: groups [0, 1] and [2, 2, 5] (population stds 0.5 and sqrt(2), batch std
    of all five rewards sqrt(2.8)); eps is added to the std, never subtracted."""
    rewards = [torch.tensor([0.0, 1.0], dtype=torch.float64), torch.tensor([2.0, 2.0, 5.0], dtype=torch.float64)]
    eps = 1e-3
    group = group_advantages(rewards, "group", eps)
    assert torch.allclose(group[0], torch.tensor([-0.5, 0.5], dtype=torch.float64) / (0.5 + eps), atol=1e-12)
    assert torch.allclose(group[1], torch.tensor([-1.0, -1.0, 2.0], dtype=torch.float64) / (2**0.5 + eps), atol=1e-12)
    batch = group_advantages(rewards, "batch", eps)
    assert torch.allclose(batch[1], torch.tensor([-1.0, -1.0, 2.0], dtype=torch.float64) / (2.8**0.5 + eps), atol=1e-12)
    assert group_advantages([], "batch") == [] and group_advantages([], "group") == []


def test_beta_without_reference_logprobs_is_one_clear_error() -> None:
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match=r"^beta > 0 needs reference log-probs$"):
        grpo_loss(x, x, torch.ones(1), torch.ones(1, 2), beta=0.1)


def test_truncated_importance_weights_are_capped_at_two_by_default() -> None:
    """The documented default cap (tis: min(pi/mu, 2)): a token whose behaviour log-prob is far
    below the learner's gets weight exactly 2, so its loss is twice the on-policy one."""
    logp = torch.zeros(1, 1)
    behaviour = torch.full((1, 1), -3.0)  # pi/mu = e^3, about 20
    on, _ = grpo_loss(logp, logp, torch.ones(1), torch.ones(1, 1))
    capped, _ = grpo_loss(logp, logp, torch.ones(1), torch.ones(1, 1), behaviour_logp=behaviour, off_policy="tis")
    assert float(capped) == pytest.approx(2 * float(on))
