"""The static decoder's prefill and buffer.

- A prompt prefix shared by every row (``decoder.shared_prefix``) is run once: the logits of the
  prefill and of the decode steps after it equal one pass over whole prompts, at fp32 rounding.
- ``KVBuffer.compact``: a finished row leaves the batch by handing its place to a still-active
  row from the back, so only the finished rows' keys and values move. Checked on a buffer whose
  every row is tagged with its index: the kept rows are exactly the active ones, in the order
  ``order`` reports, rows already in place are never touched, and compaction repeats.

End to end (rows finishing at different steps, each against a fresh forward of its own prompt,
prompts sharing a 64-token prefix): tests/test_reference_lm.py."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
import torch

from genrl_swarm.paradigms.lm import decoder as decoding
from genrl_swarm.paradigms.lm.decoder import Decoder, KVBuffer, shared_prefix
from genrl_swarm.paradigms.lm.policy import LMPolicy

from helpers.prompts import left_padded

SYSTEM = list(range(40, 60))  # 20 tokens every prompt starts with


@pytest.mark.parametrize(
    ("rope", "supported"), [(None, True), ({"rope_type": "linear", "factor": 2.0}, True), ({"rope_type": "dynamic", "factor": 2.0}, False)]
)
def test_dynamic_ntk_rope_samples_through_the_models_forward(rope: dict[str, object] | None, supported: bool) -> None:
    """HF's dynamic-NTK rotary embedding keeps state between calls (its frequencies grow once a
    call reaches past the original maximum and reset below it), so a prefill split at a shared
    prefix turned the rest of the prompt differently from one pass (0.064 at logit scale 2.1 in
    review); such models are not ``supports``ed and sample through their own forward."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=32, rope_scaling=rope,
    )  # fmt: skip
    assert decoding.supports(LlamaForCausalLM(config)) == supported


def test_shared_prefix_counts_the_common_first_tokens_and_leaves_each_prompt_one() -> None:
    assert shared_prefix(*left_padded([[*SYSTEM, 5, 6], [*SYSTEM, 7], [*SYSTEM, 5, 9, 9, 9]])) == 20
    assert shared_prefix(*left_padded([[*SYSTEM, 5, 6], [*SYSTEM, 5, 6, 7]])) == 21  # the shorter keeps its last
    assert shared_prefix(*left_padded([SYSTEM, SYSTEM])) == 19  # the same prompt twice: its last token is its own
    assert shared_prefix(*left_padded([[1, *SYSTEM], [2, *SYSTEM]])) == 0
    ids, mask = left_padded([[*SYSTEM, 5], [*SYSTEM, 6]])
    mask[0, 3] = 0  # a hole in a prompt: not left padding, so nothing is shared
    assert shared_prefix(ids, mask) == 0


@pytest.mark.parametrize("group", [1, 3])
def test_a_shared_prefix_run_once_gives_the_logits_of_whole_prompts(group: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three prompts of different lengths after a 20-token common prefix, ``group`` rows each:
    the prefill's logits and 6 greedy decode steps' equal the one-pass prefill's."""
    model = LMPolicy("tiny-random", seed=3).model
    ids, mask = left_padded([[*SYSTEM, 5, 9, 17, 3], [*SYSTEM, 40, 2], [*SYSTEM, 7, 7, 7, 7, 7, 8, 1]], pad=0)
    runs = []
    for least in (decoding.SHARED_PREFIX_MIN, 10**6):  # shared, then one pass
        monkeypatch.setattr(decoding, "SHARED_PREFIX_MIN", least)
        decoder = Decoder(model)
        with torch.inference_mode():
            buffer, logits = decoder.prefill(ids, mask, group, ids.shape[1] + 6)
            position, out = mask.sum(1).repeat_interleave(group), [logits]
            for s in range(6):
                out.append(decoder.step(out[-1].argmax(-1), position + s, buffer, ids.shape[1] + s))
        runs.append(out)
    for shared, whole in zip(*runs, strict=True):
        scale = float(whole.abs().max())
        assert float((shared - whole).abs().max()) <= 1e-5 * scale


def tagged(rows: int, width: int = 5) -> KVBuffer:
    """[layers 2, k/v, rows, kv heads 3, width, head dim 4], every entry of row r equal to r."""
    data = torch.arange(rows, dtype=torch.float32)[None, None, :, None, None, None].expand(2, 2, rows, 3, width, 4).contiguous()
    valid = torch.zeros(rows, width, dtype=torch.bool)
    for r in range(rows):
        valid[r, : 1 + r % width] = True  # a row-dependent mask, to see it move along
    return KVBuffer(data, valid)


def rows_of(buffer: KVBuffer) -> list[int]:
    tags = buffer.data[0, 0, :, 0, 0, 0]
    assert bool((buffer.data == tags[None, None, :, None, None, None]).all())  # no row mixed with another
    return [int(t) for t in tags]


@pytest.mark.parametrize("finished", [[], [0], [7], [0, 1, 2], [1, 4, 6], list(range(1, 8)), [0, 2, 4, 6]])
def test_compact_keeps_the_active_rows_and_moves_only_into_holes(finished: list[int]) -> None:
    buffer = tagged(8)
    active = torch.ones(8, dtype=torch.bool)
    active[finished] = False
    before = buffer.valid.clone()
    out, order = buffer.compact(active)
    kept = rows_of(out)
    assert kept == order.tolist()
    assert sorted(kept) == [r for r in range(8) if r not in finished]
    assert all(kept[i] == i for i in range(len(kept)) if i not in finished)  # active rows in place stay
    assert torch.equal(out.valid, before[order])
    assert out.data.data_ptr() == buffer.data.data_ptr()  # a view of the same storage, not a copy
    assert out.data[0, 0].is_contiguous()  # each layer's keys stay one block for the batched matmuls


def test_compaction_repeats_on_its_own_result() -> None:
    buffer, origin = tagged(8), torch.arange(8)
    for finished in ([2, 5], [0], [1, 2, 3]):  # positions in the current (compacted) batch
        active = torch.ones(len(origin), dtype=torch.bool)
        active[finished] = False
        gone = set(origin[finished].tolist())
        buffer, order = buffer.compact(active)
        origin = origin[order]
        assert rows_of(buffer) == origin.tolist() and not gone & set(origin.tolist())
    assert len(origin) == 2
