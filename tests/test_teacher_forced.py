"""The teacher-forced pass a spot check runs (``lm.teacher_forced``): completions side by side in one
row after the prompt give the logits the model's own forward gives each (prompt + completion), in
any chunking, on the modules and on the packed weights with an adapter's low-rank terms."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("torch")
import torch

from genrl_swarm.paradigms.lm import packed as packing
from genrl_swarm.paradigms.lm.adapters import adapt, terms
from genrl_swarm.paradigms.lm.decoder import Decoder
from genrl_swarm.paradigms.lm.policy import LMPolicy
from genrl_swarm.paradigms.lm.teacher_forced import body_logits, chunks, drawn_from, layout

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
LORA = {"r": 4, "alpha": 8, "target_modules": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")}
PROMPT = [5, 17, 99, 3, 250, 41, 7]
COMPLETIONS = [[11, 12, 13, 14, 15], [8], [300, 301, 2, 9], [21, 22, 23, 24, 25, 26, 27, 28, 29], [6]]


def own_forward(model: torch.nn.Module, completion: list[int]) -> torch.Tensor:
    """The model's forward over prompt + completion: the logits each completion token was drawn from."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([PROMPT + completion]), use_cache=False).logits[0]
    return logits[len(PROMPT) - 1 : -1].float()


@pytest.fixture(scope="module")
def adapted() -> LMPolicy:
    policy = LMPolicy("tiny-random", lora=LORA, seed=3)
    with torch.no_grad():
        for name, w in policy.model.named_parameters():
            if "lora_B" in name:  # off peft's zeros: the low-rank terms must count
                w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(len(name))) * 0.2)
    policy.model.eval()
    return policy


def test_chunks_keep_order_and_budget() -> None:
    assert chunks([5, 1, 4, 9], 6) == [[0, 1], [2], [3]]
    assert chunks([3, 3], 100) == [[0, 1]]
    assert chunks([0, 2, 0, 2], 0) == [[0], [1, 2], [3]]  # nothing but the first is empty


def test_layout_sees_the_prompt_and_only_its_own_earlier_tokens() -> None:
    positions, attend = layout(2, [2, 1], torch.device("cpu"))
    assert positions.tolist() == [0, 1, 2, 3, 2]
    assert attend.long().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 1, 0, 0, 1],
    ]


@pytest.mark.parametrize("budget", [0, 9, 512])
def test_the_pass_gives_the_models_own_logits(adapted: LMPolicy, budget: int) -> None:
    """Unpacked (the modules), chunked every way from one completion a pass to all in one."""
    assert len(chunks([len(c) - 1 for c in COMPLETIONS], budget)) == {0: 3, 9: 2, 512: 1}[budget]
    got = body_logits(Decoder(adapted.model), PROMPT, COMPLETIONS, budget)
    for completion, logits in zip(COMPLETIONS, got, strict=True):
        assert logits.shape == (len(completion), adapted.vocab_size)
        torch.testing.assert_close(logits, own_forward(adapted.model, completion), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("budget", [0, 512])
@pytest.mark.parametrize("how", ["fused", "per projection"])
def test_the_packed_pass_adds_the_adapters_terms(adapted: LMPolicy, monkeypatch: pytest.MonkeyPatch, budget: int, how: str) -> None:
    """On the base's packed weights plus the adapter's low-rank terms: fused as the sampler adds
    them (``adapt``), or each projection's accumulated into its columns (``terms``: how a receiver checks)."""
    monkeypatch.setattr(packing, "MIN_WIDTH", 0)  # the tiny model packed too
    decoder = Decoder(adapted.model)
    base = packing.PackCache().get(decoder)
    assert base is not None
    lora = None
    if how == "fused":
        decoder.packed = adapt(base, decoder.layers, decoder.head)
        assert decoder.packed is not base  # the adapter's terms are on
    else:
        decoder.packed, lora = base, terms(decoder.layers, decoder.head)
        assert lora is not None and all(set(layer) == {"qkv", "o", "gate_up", "down"} for layer in lora)
        assert all(len(layer["qkv"]) == 3 and len(layer["gate_up"]) == 2 for layer in lora)
    for completion, logits in zip(COMPLETIONS, body_logits(decoder, PROMPT, COMPLETIONS, budget, lora), strict=True):
        torch.testing.assert_close(logits, own_forward(adapted.model, completion), atol=1e-4, rtol=1e-4)


def test_every_first_token_is_drawn_from_one_row() -> None:
    """The prompt's last position is computed once, not once per completion."""
    assert drawn_from([2, 0, 1]).tolist() == [0, 1, 2, 0, 0, 3]


def test_a_pass_needs_a_prompt(adapted: LMPolicy) -> None:
    with pytest.raises(ValueError, match="prompt"):
        body_logits(Decoder(adapted.model), [], COMPLETIONS)


def test_the_passs_norms_are_the_modules_own_bits(adapted: LMPolicy) -> None:
    """``norm``: the model's fp32 RMSNorms as one ``F.rms_norm`` call, bit for bit what the module gives
    (so the pass moves nothing by rounding); anything else calls the module."""
    from genrl_swarm.paradigms.lm.teacher_forced import RMS_NORMS, norm

    layer = Decoder(adapted.model).layers[0]
    assert type(layer.input_layernorm).__name__ in RMS_NORMS
    generator = torch.Generator().manual_seed(11)
    for module in (copy.deepcopy(layer.input_layernorm), copy.deepcopy(layer.post_attention_layernorm)):  # the fixture's model untouched
        with torch.no_grad():
            module.weight.copy_(torch.randn(module.weight.shape, generator=generator))
        for rows in (1, 7, 153):
            x = torch.randn(rows, module.weight.shape[0], generator=generator) * (1 + rows)
            with torch.inference_mode():
                assert torch.equal(norm(module, x), module(x))
    other = torch.nn.LayerNorm(8)
    x = torch.randn(3, 8, generator=generator)
    with torch.inference_mode():
        assert torch.equal(norm(other, x), other(x))


def test_the_passs_rope_is_the_samplers_bits() -> None:
    """``teacher_forced.turn`` sums RoPE's two products in place: the same bits as ``RopeTables.turn``."""
    from genrl_swarm.paradigms.lm.decoder import RopeTables
    from genrl_swarm.paradigms.lm.teacher_forced import turn

    generator = torch.Generator().manual_seed(4)
    angles = torch.rand(13, 8, generator=generator) * 6
    rope = RopeTables.of(torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1), 6, 2, 0.25)
    for _ in range(5):
        x = torch.randn(13, 8, 16, generator=generator) * 4
        assert torch.equal(turn(rope, x), rope.turn(x))
