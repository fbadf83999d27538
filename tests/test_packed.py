"""Decode steps on fused, oneDNN-packed weights (lm.packed) compute what the model's modules
compute, up to rounding (bf16: one rounding fewer where a residual is added inside oneDNN, and
at 128 rows and more the plain call may pick another kernel; fp32: sums in another order): with
biases (Qwen2), at a real model's widths, with LoRA adapters added to the packed base (lm.adapters),
never with stale weights, and never bound into a compiled step. The sampler's behaviour
log-probs on this path are checked against fresh forwards in tests/test_reference_lm.py. fp32 is
packed on every oneDNN CPU; on a CPU without oneDNN bf16 kernels bf16 is not, and the same tests
check that."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")
import torch

from genrl_swarm.core import ActSeed, Task
from genrl_swarm.paradigms.lm import packed as packing
from genrl_swarm.paradigms.lm.decoder import SHARED_PREFIX_MIN, Decoder
from genrl_swarm.paradigms.lm.policy import LMPolicy
from genrl_swarm.paradigms.lm.seeding import Uniforms
from genrl_swarm.paradigms.lm.static_sampling import sample_static

from helpers.prompts import left_padded

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
QUESTIONS = ("Calculate 1 + 2.", "Calculate 7 * 3.", "q")
PACKS = {dtype: packing.available(dtype, torch.device("cpu")) for dtype in (torch.bfloat16, torch.float32)}


@pytest.fixture(autouse=True)
def pack_any_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests below pack small models (fast, and what they check does not depend on width);
    ``test_narrow_models_are_not_packed`` checks the width rule itself."""
    monkeypatch.setattr(packing, "MIN_WIDTH", 0)


@pytest.fixture(scope="module", params=["bfloat16", "float32"])
def policy(request: pytest.FixtureRequest) -> LMPolicy:
    """The sampler in each dtype: fp32 is packed on every oneDNN CPU, so the tests below check
    packing even on a CPU without bf16 kernels."""
    return LMPolicy("tiny-random", {"num_generations": 4, "max_new_tokens": 16, "dtype": request.param, "kv_cache": "static"}, seed=3)


def dtype(policy: LMPolicy) -> torch.dtype:
    out = getattr(torch, policy.sampling.dtype)
    assert isinstance(out, torch.dtype)
    return out


def qwen2_with_biases(dtype: torch.dtype) -> Any:
    """A random two-layer Qwen2: biases on q/k/v, which the fused qkv must carry."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    model = Qwen2ForCausalLM(config).to(dtype).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)  # nonzero, so a lost bias changes the logits
    return model


def llama_at_smollm2_widths(dtype: torch.dtype) -> Any:
    """One random layer at SmolLM2-135M's widths (hidden 576, 9 heads over 3 kv heads, MLP 1536)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=2048, hidden_size=576, intermediate_size=1536, num_hidden_layers=1, num_attention_heads=9, num_key_value_heads=3)
    return LlamaForCausalLM(config).to(dtype).eval()


def assert_close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal up to a few roundings of their dtype at the logits' scale: bf16 keeps 8 significant
    bits; fp32 keeps 24, and sums of up to 1,536 products taken in another order differ by a
    few hundred of its steps at most (2**-12 of the scale is ~4,000 steps: a wrong weight, a
    lost bias or a misplaced fusion changes logits by far more)."""
    assert a.dtype == b.dtype
    scale = float(b.float().abs().max())
    step = 2**-8 if a.dtype == torch.bfloat16 else 2**-14
    assert float((a.float() - b.float()).abs().max()) <= 4 * step * scale


def decoder(model: Any, pack: bool) -> Decoder:
    out = Decoder(model)
    if pack:
        out.packed = packing.PackCache().get(out)
    return out


def prompts(pad: int, shared: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Three prompts, after a common prefix of ``shared`` tokens (prefilled once from
    ``SHARED_PREFIX_MIN`` on)."""
    prefix = [11 + i % 50 for i in range(shared)]
    ids, mask = left_padded([prefix + row for row in ([5, 9, 17, 3], [40, 2], [7, 7, 7, 7, 7, 8])], pad)
    return ids, mask


@torch.inference_mode()
def steps(model: Any, pack: bool, count: int = 5, group: int = 2, shared: int = 0) -> tuple[bool, list[torch.Tensor]]:
    """Logits of the prefill and of ``count`` greedy decode steps (3 prompts x ``group`` rows), and
    whether weights were packed."""
    decoding = decoder(model, pack)
    ids, mask = prompts(0, shared)
    buffer, logits = decoding.prefill(ids, mask, group, ids.shape[1] + count)
    position = mask.sum(1).repeat_interleave(group)
    out = [logits.clone()]
    for s in range(count):
        token = logits.argmax(-1)
        logits = decoding.step(token, position + s, buffer, ids.shape[1] + s)
        out.append(logits.clone())
    return decoding.packed is not None, out


@pytest.mark.parametrize(
    ("which", "group", "shared"),
    [("tiny-llama", 2, 0), ("tiny-llama", 2, SHARED_PREFIX_MIN + 4), ("qwen2-biases", 2, 0), ("smollm2-widths", 21, 0), ("smollm2-widths", 67, 0)],
)
def test_packed_steps_match_the_modules(policy: LMPolicy, which: str, group: int, shared: int) -> None:
    """3 x ``group`` rows: 6, 63 (a decode batch) and 201 (past where the plain call changes kernel);
    the prefill too (packed as well), with and without a shared prefix."""
    model = {"tiny-llama": lambda d: policy.sampling_model(), "qwen2-biases": qwen2_with_biases, "smollm2-widths": llama_at_smollm2_widths}[which](
        dtype(policy)
    )
    assert model.dtype == dtype(policy)
    packed, fast = steps(model, pack=True, group=group, shared=shared)
    unpacked, plain = steps(model, pack=False, group=group, shared=shared)
    assert packed == PACKS[dtype(policy)] and not unpacked
    for a, b in zip(fast, plain, strict=True):
        assert_close(a, b)


@pytest.mark.parametrize("targets", [["q_proj"], ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]])
def test_lora_layers_run_packed_as_the_base_plus_their_low_rank_term(policy: LMPolicy, targets: list[str]) -> None:
    """A LoRA projection's base weight is packed and the adapter added on top (``lm.adapters``):
    the logits of the prefill and of decode steps are the modules' (peft's), with trained (nonzero)
    adapters on some or all projections; the base's packing alone would drop them."""
    from peft import LoraConfig, get_peft_model

    from genrl_swarm.paradigms.lm.adapters import adapt

    model = get_peft_model(LMPolicy("tiny-random", seed=1).model, LoraConfig(r=4, target_modules=targets)).to(dtype(policy)).eval()
    with torch.no_grad():
        for name, w in model.named_parameters():
            if "lora_B" in name:
                w.normal_(0, 0.2, generator=torch.Generator().manual_seed(len(name)))
    inner = model.get_base_model()
    base = packing.for_decoder(inner.model.layers, inner.lm_head)
    assert (base is not None) == PACKS[dtype(policy)]
    if base is None:
        return
    packed = adapt(base, inner.model.layers, inner.lm_head)
    assert packed is not None and packed is not base
    for a, b in zip(run_steps(model, packed), run_steps(model, None), strict=True):
        assert_close(a, b)
    dropped = run_steps(model, base)[-1]
    assert float((dropped - run_steps(model, None)[-1]).abs().max()) > 0.1  # the test sees a lost adapter


@torch.inference_mode()
def run_steps(model: Any, packed: packing.PackedWeights | None, count: int = 3) -> list[torch.Tensor]:
    """``steps`` on given packed weights (None: the modules)."""
    decoding = Decoder(model)
    decoding.packed = packed
    ids, mask = prompts(0)
    buffer, logits = decoding.prefill(ids, mask, 2, ids.shape[1] + count)
    position, out = mask.sum(1).repeat_interleave(2), [logits.clone()]
    for s in range(count):
        logits = decoding.step(logits.argmax(-1), position + s, buffer, ids.shape[1] + s)
        out.append(logits.clone())
    return out


def first_step(model: Any, packed: packing.PackedWeights | None) -> torch.Tensor:
    decoding = Decoder(model)
    decoding.packed = packed
    ids, mask = prompts(0)
    buffer, logits = decoding.prefill(ids, mask, 2, ids.shape[1] + 1)
    with torch.inference_mode():
        return decoding.step(logits.argmax(-1), mask.sum(1).repeat_interleave(2), buffer, ids.shape[1])


def test_weights_are_packed_again_only_when_they_changed(policy: LMPolicy) -> None:
    """One packing per set of weights; an optimiser step (in place) repacks, and the sampler acts
    with the new weights: its packing computes what a fresh packing of them computes."""
    tokens = [policy.prompt_ids(Task.create(q).input(0)) for q in QUESTIONS]
    cache = policy._packs
    policy.generate(tokens, 1, greedy=True)
    before = cache.packs
    policy.generate(tokens, 2)
    assert cache.packs == before
    weight = policy.model.model.layers[-1].mlp.down_proj.weight
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight.add_(torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)))  # in place, as the learner's step
        policy.generate(tokens, 1, greedy=True)
        assert cache.packs == before + int(PACKS[dtype(policy)])
        model = policy.sampling_model()
        current = first_step(model, cache.get(Decoder(model)))
        assert torch.equal(current, first_step(model, packing.PackCache().get(Decoder(model))))
        assert_close(current, first_step(model, None))
    finally:
        with torch.no_grad():
            weight.copy_(saved)


def test_a_compiled_step_never_runs_a_stale_packing(policy: LMPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sampling.compile`` keeps the step of the first decoder; with packing, that decoder's
    packing would outlive a weight change (found by review). Compiling is replaced by the
    identity here: what matters is which decoder the kept step is bound to."""
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    tokens = [policy.prompt_ids(Task.create(q).input(0)) for q in QUESTIONS]
    weight = policy.model.model.layers[-1].mlp.down_proj.weight
    saved, compile_saved = weight.detach().clone(), policy.sampling.compile
    policy.sampling.compile = True
    try:
        policy.generate(tokens, 1, greedy=True)
        with torch.no_grad():
            weight.add_(torch.randn(weight.shape, generator=torch.Generator().manual_seed(1)))
        compiled = policy.generate(tokens, 1, greedy=True).ids
        policy.sampling.compile, policy.sampling.pack = False, False  # the modules, current weights
        assert torch.equal(compiled, policy.generate(tokens, 1, greedy=True).ids)
    finally:
        policy.sampling.compile, policy.sampling.pack = compile_saved, True
        policy._compiled = None
        with torch.no_grad():
            weight.copy_(saved)


def test_another_model_is_packed_even_where_its_weight_key_repeats(policy: LMPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model rebuilt after its predecessor was freed (a LoRA merge) can reuse its addresses with
    every version counter at 0: the cache must not take it for the model it packed."""
    monkeypatch.setattr(packing, "weight_key", lambda weights: ())
    cache = packing.PackCache()
    first = cache.get(Decoder(policy.sampling_model()))
    second = cache.get(Decoder(qwen2_with_biases(dtype(policy))))
    assert cache.packs == 2 * int(PACKS[dtype(policy)]) and (first is None or second is not first)


@pytest.mark.parametrize("shared", [0, SHARED_PREFIX_MIN + 4])
def test_nan_left_in_a_new_kv_buffer_never_reaches_the_logits(policy: LMPolicy, monkeypatch: pytest.MonkeyPatch, shared: int) -> None:
    """The buffer is never zeroed: the prefill must write every prompt column (padding included),
    and after a shared prefix zero the columns no prompt reaches (here a padding column every
    prompt has), or a NaN left in memory reaches the logits through a masked score. Sampling over
    NaN-filled memory must equal sampling over whatever memory held."""
    import genrl_swarm.paradigms.lm.decoder as decoding

    model = policy.sampling_model()
    assert model.dtype == dtype(policy)
    ids, mask = prompts(policy.tokenizer.pad_token_id, shared)
    ids, mask = torch.cat([torch.full_like(ids[:, :1], policy.tokenizer.pad_token_id), ids], 1), torch.cat([torch.zeros_like(mask[:, :1]), mask], 1)
    assert (decoding.shared_prefix(ids, mask) >= SHARED_PREFIX_MIN) == bool(shared)
    out = []
    for poison in (False, True):
        with monkeypatch.context() as patch:
            if poison:
                patch.setattr(decoding.torch, "empty", lambda *a, **k: torch.full(a[0], float("nan"), dtype=k["dtype"]))
            keys = Uniforms.of(ActSeed(b"packed", 9, "peer"), [str(i) for i in range(len(ids))], 3)
            out.append(sample_static(decoder(model, pack=True), ids, mask, 3, 12, policy.eos_ids, uniforms=keys))
    assert not out[1].logprobs.isnan().any()
    assert torch.equal(out[0].ids, out[1].ids) and torch.equal(out[0].logprobs, out[1].logprobs)


def test_narrow_models_are_not_packed(policy: LMPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
    """At the default ``MIN_WIDTH`` the tiny model (width 64) runs its modules; SmolLM2's width is packed."""
    monkeypatch.undo()  # the default width rule, not pack_any_width's
    assert packing.MIN_WIDTH == 256
    assert packing.PackCache().get(Decoder(policy.sampling_model())) is None
    wide = Decoder(llama_at_smollm2_widths(dtype(policy)))
    assert packing.pays(wide) == PACKS[dtype(policy)]
    assert (packing.PackCache().get(wide) is not None) == PACKS[dtype(policy)]


def test_packing_is_on_where_it_pays() -> None:
    """fp32 on every oneDNN CPU, bf16 only with oneDNN bf16 kernels, never another dtype or device."""
    assert packing.available(torch.float32, torch.device("cpu")) == torch.backends.mkldnn.is_available()
    assert packing.available(torch.bfloat16, torch.device("cpu")) == bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert not packing.available(torch.float16, torch.device("cpu"))
    assert not packing.available(torch.float32, torch.device("cuda"))
