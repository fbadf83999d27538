"""The learner's speed levers against plain computations: same gradients, only faster.

- shared prefix (each group's prompt forwarded once, its KV cache reused by the completions,
  gradients pushed back through it) and length buckets: in float64 the learner's gradient
  equals a per-sequence, unpadded float64 reference to 1e-5 of its largest entry, with
  several chunks per prompt (leaf gradients accumulated across chunks), uneven completion
  lengths (padding inside chunks) and two bodies with the same prompt (merged into one group).
  (Not 1e-12: HF's RMSNorm and rotary tables compute in float32 even in a float64 model, so
  the two orders of summation differ by ~1e-6 of the largest entry; a missing or misplaced
  prompt gradient is off by far more than 1e-5.)
- the fused log-prob gather: values and gradients equal ``log_softmax`` + gather, across its
  chunk boundaries and at a temperature;
- bf16: parameters, gradients and AdamW state stay float32; the gradient is within 5% (relative
  L2) of the float32 one and the log-probs within 0.1 nats (stated here, measured ~1% / ~0.02).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

pytest.importorskip("torch")
import torch

import genrl_swarm.paradigms.lm.logprobs as logprobs
from genrl_swarm.core import GameState, Rollout, RoundRewards, ScoredRollout, Task, TokenRollout
from genrl_swarm.paradigms.lm.grpo_loss import group_advantages, grpo_loss
from genrl_swarm.paradigms.lm.learner import GRPOLearner, Sample
from genrl_swarm.paradigms.lm.policy import LMPolicy
from genrl_swarm.paradigms.lm.prefix import Chunking, SharedPrefixForward, group_by_prompt

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
QUESTIONS = ("Calculate 1 + 2.", "Calculate 7 * 3.", "q", "Calculate 1 + 2.")  # the last repeats the first
REWARDS = [(1.0, 0.0, 0.0, 1.0, 0.5), (0.0, 0.5, 1.0, 2.0, 0.0), (1.0, 0.0, 1.0, 0.0, 1.0), (0.0, 1.0, 0.0, 0.0, 1.0)]


@pytest.fixture(scope="module")
def policy() -> LMPolicy:
    return LMPolicy("tiny-random", {"num_generations": 5, "max_new_tokens": 12, "temperature": 1.3}, seed=7)


def uneven(body: TokenRollout) -> TokenRollout:
    """Sample j cut to its first ``len - 2 * (j % 3)`` tokens (at least one): a prefix of a sample
    is a sample of that length, and the lengths are uneven whatever this CPU's tiny model emits
    (how often it stops on EOS depends on the kernels it was trained and sampled with)."""
    cut = [max(1, len(s.completion_ids) - 2 * (j % 3)) for j, s in enumerate(body.samples)]
    samples = tuple(
        s
        if n == len(s.completion_ids)
        else msgspec.structs.replace(s, completion_ids=s.completion_ids[:n], logprobs=s.logprobs[:n], finish_reason="length")
        for s, n in zip(body.samples, cut, strict=True)
    )
    return msgspec.structs.replace(body, samples=samples)


@pytest.fixture(scope="module")
def bodies(policy: LMPolicy) -> list[TokenRollout]:
    out = [uneven(b) for b in policy.rollouts([Task.create(q).input(0) for q in QUESTIONS])]
    lengths = {len(s.completion_ids) for b in out for s in b.samples}
    assert len(lengths) > 2 and out[0].prompt_ids == out[3].prompt_ids  # uneven lengths, one shared prompt
    return out


@pytest.fixture(scope="module")
def reference(policy: LMPolicy, bodies: list[TokenRollout]) -> list[torch.Tensor]:
    return reference_grads(policy, bodies, torch.float64)


def scored(bodies: Sequence[TokenRollout]) -> RoundRewards:
    return RoundRewards(0, tuple(ScoredRollout(Rollout("me", 0, 0, b), r) for b, r in zip(bodies, REWARDS, strict=True)))


def learner_grads(
    policy: LMPolicy, bodies: Sequence[TokenRollout], dtype: torch.dtype, fed: list[tuple[bool, list[int]]] | None = None, **cfg: Any
) -> tuple[list[torch.Tensor], GRPOLearner]:
    """Gradients of one learner update on a copy of the policy in ``dtype`` (learning rate 0);
    ``fed`` collects every row of input ids the decoder is called with, marked True in a prompt
    pass (no cache given) and False in a completion pass."""
    p = copy.copy(policy)
    p.model = copy.deepcopy(policy.model).to(dtype)
    if fed is not None:
        p.model.get_decoder().register_forward_pre_hook(
            lambda m, a, k: fed.extend((k.get("past_key_values", k.get("cache")) is None, row) for row in k["input_ids"].tolist()), with_kwargs=True
        )
    learner = GRPOLearner(p, {"learning_rate": 0.0, "max_grad_norm": 1e9, "off_policy": "tis", **cfg})
    learner.train(GameState(0, "me"), scored(bodies))
    return [w.grad.detach().clone() for w in p.model.parameters()], learner


def reference_grads(policy: LMPolicy, bodies: Sequence[TokenRollout], dtype: torch.dtype) -> list[torch.Tensor]:
    """One unpadded forward per sequence in ``dtype`` (no float32 upcast), log_softmax + gather."""
    model = copy.deepcopy(policy.model).to(dtype).train()
    temperature = policy.sampling.temperature
    advs = group_advantages([torch.tensor(r) for r in REWARDS])
    total = float(sum(len(s.completion_ids) for b in bodies for s in b.samples))
    for body, adv in zip(bodies, advs, strict=True):
        for s, a in zip(body.samples, adv.tolist()):
            ids = torch.tensor([[*body.prompt_ids, *s.completion_ids]])
            logits = model(input_ids=ids).logits[0, len(body.prompt_ids) - 1 : -1] / temperature
            logp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(s.completion_ids)[:, None]).T
            mask = torch.ones_like(logp)
            loss, _ = grpo_loss(logp, logp.detach(), torch.tensor([a], dtype=dtype), mask, total_tokens=total,
                                behaviour_logp=torch.tensor([s.logprobs]), off_policy="tis")  # fmt: skip
            loss.backward()
    return [w.grad for w in model.parameters()]


def assert_close(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], rel: float) -> None:
    scale = max(float(g.abs().max()) for g in want)
    worst = max(float((a - b).abs().max()) for a, b in zip(got, want, strict=True))
    assert worst <= rel * scale, (worst, scale)


@pytest.mark.parametrize(
    "cfg",
    [
        {"micro_batch_size": 3},  # several chunks per prompt, buckets
        {"micro_batch_size": 64, "bucket": False},  # one chunk per prompt, padded to its longest
        {"micro_batch_size": 4, "max_padding": 0.0, "fused_logprobs": False},  # one length per chunk, plain head
    ],
    ids=["chunks-buckets", "one-chunk-no-buckets", "no-padding-plain-head"],
)
def test_shared_prefix_gradient_equals_per_sequence_reference(
    policy: LMPolicy, bodies: list[TokenRollout], reference: list[torch.Tensor], cfg: dict[str, Any]
) -> None:
    got, learner = learner_grads(policy, bodies, torch.float64, **cfg)
    assert learner.uses_shared_prefix()
    assert_close(got, reference, rel=1e-5)


def test_buckets_keep_padding_below_the_limit(bodies: list[TokenRollout]) -> None:
    samples = [_sample(b, s) for b in bodies for s in b.samples]
    for limit in (0.0, 0.25):
        groups = group_by_prompt(samples, Chunking(rows=4, bucket=True, max_waste=limit), 0, torch.device("cpu"))
        assert sum(len(g.prompt_ids) for g in groups) == 3 and sum(len(c.advantages) for g in groups for c in g.chunks) == len(samples)
        for chunk in (c for g in groups for c in g.chunks):
            assert 1 - float(chunk.completion_mask.mean()) <= limit + 1e-9 and len(chunk.advantages) <= 4


def test_shared_prefix_feeds_each_prompt_once_and_exactly_the_sampled_ids(policy: LMPolicy, bodies: list[TokenRollout]) -> None:
    fed: list[tuple[bool, list[int]]] = []
    learner_grads(policy, bodies, torch.float32, fed, micro_batch_size=64, bucket=False)
    pad = policy.tokenizer.pad_token_id
    prompts = [tuple(row[next(i for i, x in enumerate(row) if x != pad) :]) for first, row in fed if first]  # left pads off
    assert sorted(prompts) == sorted({tuple(b.prompt_ids) for b in bodies})  # the repeated question: one prompt pass
    # A chunk feeds each completion right-padded to the chunk's width, without the last column
    # (it predicts nothing): a row is the completion (shorter than the width) or all but its
    # last token (the longest), then pads.
    pad = policy.tokenizer.pad_token_id
    rows = Counter(tuple(row) for first, row in fed if not first)
    stripped: Counter[tuple[int, ...]] = Counter()
    for row, n in rows.items():
        end = len(row)
        while end and row[end - 1] == pad:
            end -= 1
        stripped[row[:end]] += n
    for c in sorted((tuple(s.completion_ids) for b in bodies for s in b.samples), key=len, reverse=True):
        key = c if stripped[c] > 0 else c[:-1]
        assert stripped[key] > 0 or not key, c
        stripped[key] -= 1
    assert not +stripped  # nothing else was fed


def test_fused_logprobs_equal_log_softmax(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logprobs, "CHUNK_ELEMENTS", 50 * 7)  # 7 rows per chunk: 3 chunks for 17 rows
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(17, 8, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = torch.randn(50, 8, dtype=torch.float64, generator=gen, requires_grad=True)
    targets = torch.randint(0, 50, (17,), generator=gen)
    upstream = torch.randn(17, dtype=torch.float64, generator=gen)
    fused = logprobs.fused_token_logps(hidden, weight, targets, 0.7, torch.float64)
    fused_grads = torch.autograd.grad((fused * upstream).sum(), (hidden, weight))
    plain = torch.log_softmax(hidden @ weight.T / 0.7, -1).gather(-1, targets[:, None]).squeeze(-1)
    plain_grads = torch.autograd.grad((plain * upstream).sum(), (hidden, weight))
    assert torch.allclose(fused, plain, atol=1e-12)
    for a, b in zip(fused_grads, plain_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-12)


def test_fused_logprobs_with_a_frozen_head_give_the_hidden_gradient_alone() -> None:
    """LoRA freezes the head: the backward skips its weight gradient, the hidden one is unchanged."""
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(9, 8, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = torch.randn(50, 8, dtype=torch.float64, generator=gen)  # frozen
    targets = torch.randint(0, 50, (9,), generator=gen)
    (fused,) = torch.autograd.grad(logprobs.fused_token_logps(hidden, weight, targets, 1.3, torch.float64).sum(), hidden)
    (plain,) = torch.autograd.grad(torch.log_softmax(hidden @ weight.T / 1.3, -1).gather(-1, targets[:, None]).sum(), hidden)
    assert weight.grad is None and torch.allclose(fused, plain, atol=1e-12)


def test_bf16_update_is_close_to_float32_with_float32_master_weights(policy: LMPolicy, bodies: list[TokenRollout]) -> None:
    fp32, _ = learner_grads(policy, bodies, torch.float32, precision="float32")
    bf16, learner = learner_grads(policy, bodies, torch.float32, precision="bfloat16")
    assert learner.compute_dtype() == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in learner.model.parameters()) and all(g.dtype == torch.float32 for g in bf16)
    state = [t for s in learner.optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.numel() > 1]
    assert state and all(t.dtype == torch.float32 for t in state)  # AdamW's moments: float32
    num = torch.sqrt(sum(((a - b) ** 2).sum() for a, b in zip(bf16, fp32, strict=True)))
    den = torch.sqrt(sum((b**2).sum() for b in fp32))
    assert float(num / den) < 0.05, float(num / den)
    # The log-probs themselves (what the off-policy correction sees as a behaviour mismatch).
    samples = [s for b in bodies[:1] for s in b.samples]
    (group,) = group_by_prompt([_sample(bodies[0], s) for s in samples], Chunking(64), 0, torch.device("cpu"))
    t = policy.sampling.temperature
    lp32 = SharedPrefixForward(t, True, torch.float32).logps(policy.model, group)[0]
    lp16 = SharedPrefixForward(t, True, torch.bfloat16).logps(policy.model, group)[0]
    assert 0 < float((lp32 - lp16).abs().max()) < 0.1


def _sample(body: TokenRollout, s: Any) -> Sample:
    return Sample(body.prompt_ids, s.completion_ids, s.logprobs, 1.0)


@pytest.mark.parametrize("epochs, passes", [(1, 1), (2, 3)])
def test_shared_prefix_stores_proximal_logprobs_only_for_several_epochs(
    policy: LMPolicy, bodies: list[TokenRollout], epochs: int, passes: int
) -> None:
    fed: list[tuple[bool, list[int]]] = []
    learner_grads(policy, bodies, torch.float32, fed, num_epochs=epochs)
    assert sum(first for first, _ in fed) == passes * len({tuple(b.prompt_ids) for b in bodies})


def test_shared_prefix_with_lora_on_q_and_v_only_equals_the_plain_update(bodies: list[TokenRollout]) -> None:
    """LoRA on q and v leaves layer 0's prompt keys without a graph (k_proj and the embeddings
    are frozen): the prompt's backward must skip them, not fail, and give the plain gradients."""
    lora = LMPolicy("tiny-random", {"num_generations": 5, "max_new_tokens": 12, "temperature": 1.3},
                    lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}, seed=7)  # fmt: skip
    with torch.no_grad():
        for name, w in lora.model.named_parameters():
            if "lora_B" in name:
                w.normal_(0.0, 0.1)  # trained adapters: the prompt's path matters
    grads = {}
    for prefix in (True, False):
        p = copy.copy(lora)
        p.model = copy.deepcopy(lora.model).to(torch.float64)
        learner = GRPOLearner(p, {"learning_rate": 0.0, "max_grad_norm": 1e9, "off_policy": "tis", "shared_prefix": prefix})
        learner.train(GameState(0, "me"), scored(bodies))
        assert learner.uses_shared_prefix() == prefix
        grads[prefix] = [w.grad.detach().clone() for w in p.model.parameters() if w.requires_grad]
    assert grads[True] and all(float(g.abs().max()) > 0 for g in grads[False][:2])
    assert_close(grads[True], grads[False], rel=1e-5)


def test_a_batch_with_an_empty_completion_trains_on_the_plain_path(policy: LMPolicy, bodies: list[TokenRollout]) -> None:
    """The prefix kernels need a token per row; an empty completion (from a source other than
    this sampler) sends the batch down the per-sequence path instead of failing."""
    empty = msgspec.structs.replace(bodies[2], samples=tuple(msgspec.structs.replace(s, completion_ids=(), logprobs=()) for s in bodies[2].samples))
    got, learner = learner_grads(policy, [bodies[0], bodies[1], empty, bodies[3]], torch.float64)
    assert learner.uses_shared_prefix() and all(float(g.abs().max()) > 0 for g in got[:1])
