"""GRPO/DAPO objective against hand-computed values."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from genrl_swarm.trainers.grpo_loss import clipped_surrogate, group_advantages, grpo_loss, k3_kl


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
    parts = [grpo_loss(logp[i : i + 2], old[i : i + 2], adv[i : i + 2], mask[i : i + 2], behaviour_logp=behaviour[i : i + 2], **opts, **totals)[0] for i in (0, 2)]
    assert float(sum(parts)) == pytest.approx(float(full), rel=1e-5)


def test_config_errors_name_the_field() -> None:
    from genrl_swarm.lm.policy import SamplingConfig
    from genrl_swarm.trainers.grpo import GRPOConfig

    with pytest.raises(ValueError, match=r"grpo.off_policy must be none, tis or decoupled, got 'clip'"):
        GRPOConfig(off_policy="clip")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"grpo.is_cap must be >= 1"):
        GRPOConfig(is_cap=0.5)
    with pytest.raises(ValueError, match=r"sampling.top_p must be in \(0, 1\]"):
        SamplingConfig(top_p=0.0)
