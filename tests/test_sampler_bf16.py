"""Sampling in bf16 against the fp32 learner: how far the behaviour log-probs are, and that the
bf16 copy always acts with the policy's current weights.

Tolerances (tiny model; measured: mean |dlogp| ~0.007, max |dp| ~0.06, mean weight ~0.999):
- mean |bf16 log-prob - fp32 log-prob| over sampled tokens <= 0.02;
- every token's probability within 0.1 of fp32's (log-probs of rare tokens may differ more:
  a 0.3 log-prob gap at p = 0.01 is a 0.003 probability gap, harmless to the learner);
- the implied importance weights exp(fp32 - bf16) average within 0.02 of 1.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
import torch

from genrl_swarm.core import Task, Weights
from genrl_swarm.paradigms.lm.policy import LMPolicy

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
MEAN_ABS_LOGP = 0.02
MAX_ABS_PROB = 0.1
MEAN_WEIGHT_SLACK = 0.02


@pytest.fixture(scope="module")
def policy() -> LMPolicy:
    return LMPolicy("tiny-random", {"num_generations": 8, "max_new_tokens": 16, "dtype": "bfloat16"}, seed=5)


def fp32_logprobs(policy: LMPolicy, prompt: tuple[int, ...], completion: tuple[int, ...]) -> torch.Tensor:
    """What the learner computes: the fp32 model's log-probs of the completion's tokens."""
    seq = torch.tensor([[*prompt, *completion]])
    with torch.no_grad():
        logp = torch.log_softmax(policy.model(input_ids=seq).logits[0, len(prompt) - 1 : -1].double(), -1)
    return logp.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def test_bf16_sampling_logprobs_are_within_tolerance_of_fp32(policy: LMPolicy) -> None:
    assert next(policy.model.parameters()).dtype == torch.float32  # the learner's weights stay fp32
    bodies = policy.rollouts([Task.create(f"Calculate {i} * {i + 3}.").input(0) for i in range(4)])
    behaviour, learner = [], []
    for body in bodies:
        for s in body.samples:
            behaviour.append(torch.tensor(s.logprobs, dtype=torch.float64))
            learner.append(fp32_logprobs(policy, body.prompt_ids, s.completion_ids))
    b, f = torch.cat(behaviour), torch.cat(learner)
    assert len(b) > 200
    diff = f - b
    assert 0 < float(diff.abs().mean()) <= MEAN_ABS_LOGP  # > 0: the sampler really ran in bf16
    assert float((f.exp() - b.exp()).abs().max()) <= MAX_ABS_PROB
    assert abs(float(diff.exp().mean()) - 1.0) <= MEAN_WEIGHT_SLACK


def test_bf16_copy_follows_every_weight_change(policy: LMPolicy) -> None:
    """In one process the learner steps the policy's own fp32 module in place (no copy is handed
    over); a state dict arrives through ``load_weights``. Either way the next sampling call must
    run on the new weights, and an unchanged model must not be copied again."""
    first = policy.sampling_model()
    store = policy._sampling_models["bfloat16"]
    refreshes = store.refreshes
    assert policy.sampling_model() is first and store.refreshes == refreshes  # nothing changed, no copy

    def matches(copy: torch.nn.Module) -> bool:
        return all(torch.equal(c, p.to(torch.bfloat16)) for c, p in zip(copy.parameters(), policy.model.parameters(), strict=True))

    saved = {k: v.clone() for k, v in policy.model.state_dict().items()}
    try:
        with torch.no_grad():  # an optimiser step, in place
            for p in policy.model.parameters():
                p.add_(0.01 * torch.randn_like(p))
        assert not matches(first)
        assert matches(policy.sampling_model()) and store.refreshes == refreshes + 1
        policy.load_weights(Weights(policy.version + 1, saved))  # weights from elsewhere
        assert matches(policy.sampling_model()) and store.refreshes == refreshes + 2
    finally:
        policy.model.load_state_dict(saved)


def test_sampling_threads_apply_during_the_call_only(policy: LMPolicy) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the process's setting, which sampling.threads=1 must not leave changed
    seen: list[int] = []
    original = policy._generate

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)  # type: ignore[arg-type]

    policy.sampling.threads, policy._generate = 1, spy  # type: ignore[method-assign]
    try:
        policy.generate([policy.prompt_ids(Task.create("q").input(0))], 2)
    finally:
        policy.sampling.threads = 0
        del policy._generate
        after = torch.get_num_threads()
        torch.set_num_threads(before)
    assert seen == [1] and after == 2
