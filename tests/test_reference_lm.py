"""The sampler against plain, obviously-correct computations.

- Every sampled row, on every sampler path (static KV buffer or DynamicCache, fp32 or bf16, HF
  generate), for several samples per prompt and with rows finishing (and dropped from the
  batch) at different steps, against a fresh forward of its own prompt + prefix: the behaviour
  log-prob of each token, the nucleus it was drawn from, and greedy choices.
- ``pick`` against the tempered / nucleus distribution it claims, by chi-square at fixed seeds.
- The tiny test model: deterministic, and not degenerate (prompt-dependent, EOS at different steps).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
import torch

from genrl_swarm.core import ActSeed, Task, TokenRollout
from genrl_swarm.paradigms.lm.policy import LMPolicy
from genrl_swarm.paradigms.lm.sampling import BLOCK, draw_tempered, pick
from genrl_swarm.paradigms.lm.seeding import Uniforms

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]  # sampling statistics over many draws
#: Greedy replies of the tiny model end on EOS after 12, 15 and 8 tokens.
QUESTIONS = ("Calculate 1 + 2.", "Calculate 7 * 3.", "q")
#: 0.999 quantiles of chi-square by degrees of freedom: a correct sampler fails 1 time in 1000
#: per test; fixed seeds make each run deterministic.
CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32}


@pytest.fixture(scope="module")
def policy() -> LMPolicy:
    return LMPolicy("tiny-random", {"num_generations": 4, "max_new_tokens": 16}, seed=4)


@contextmanager
def sampling(policy: LMPolicy, **changes: Any) -> Iterator[None]:
    saved = policy.sampling
    policy.sampling = replace(saved, **changes)
    try:
        yield
    finally:
        policy.sampling = saved


def nucleus(probs: Sequence[float], top_p: float) -> dict[int, float]:
    """Token -> probability renormalised over the smallest most-likely prefix whose mass reaches top_p."""
    kept: list[int] = []
    mass = 0.0
    for token in sorted(range(len(probs)), key=lambda i: -probs[i]):
        if mass >= top_p:
            break
        kept.append(token)
        mass += probs[token]
    return {t: probs[t] / mass for t in kept}


def fresh_distributions(policy: LMPolicy, prompt: Sequence[int], completion: Sequence[int], temperature: float) -> list[list[float]]:
    """Tempered next-token probabilities before each completion token, from one forward of
    prompt + completion, unpadded, no cache, by the model the sampler ran (the bf16 copy when
    ``sampling.dtype`` is bfloat16)."""
    seq = torch.tensor([[*prompt, *completion]])
    with torch.no_grad():
        logits = policy.sampling_model()(input_ids=seq).logits[0, len(prompt) - 1 : -1].double()
    return torch.softmax(logits / temperature, -1).tolist()


def rollouts(policy: LMPolicy, temperature: float, top_p: float, **changes: Any) -> list[TokenRollout]:
    with sampling(policy, temperature=temperature, top_p=top_p, **changes):
        return policy.rollouts([Task.create(q).input(0) for q in QUESTIONS])


#: The sampler paths: (sampling changes, log-prob tolerance against the fresh forward). fp32
#: paths agree with a fresh forward to float rounding; in bf16 the decoder's and the model's
#: forward round differently (another summation order): a logit of magnitude 8-16 moves by one
#: bf16 step (0.0625) at a time, 16-32 by 0.125, and a log-prob moves with its token's logit and
#: the normaliser; 6e-2 failed on a sample at 0.072, 0.125 on one at 0.135 (log-prob -5.2,
#: T=1.5). The fp32 paths hold every formula to 2e-3; bf16 is checked for the right token and
#: distribution, not for rounding.
#: bf16: probabilities differ by up to ~13% each (two bf16 steps of a logit), so the mass before
#: the nucleus's last token may cross top_p in one forward and not the other.
BF16_MASS_SLACK = 0.1

PATHS = {
    "static-fp32": ({"sampler": "lean", "kv_cache": "static"}, 2e-3),
    "dynamic-fp32": ({"sampler": "lean", "kv_cache": "dynamic"}, 2e-3),
    "static-bf16": ({"sampler": "lean", "kv_cache": "static", "dtype": "bfloat16"}, 0.25),
    "hf-fp32": ({"sampler": "hf"}, 2e-3),
}


# --------------------------------------------------------------------------- sampled rows
@pytest.mark.parametrize(
    "path, temperature, top_p",
    [("static-fp32", 1.0, 1.0), ("static-fp32", 1.5, 0.9), ("dynamic-fp32", 1.0, 1.0), ("dynamic-fp32", 1.5, 0.9),
     ("static-bf16", 1.0, 1.0), ("static-bf16", 1.5, 0.9), ("hf-fp32", 0.7, 0.9)],
)  # fmt: skip
def test_each_sampled_row_matches_a_fresh_forward_of_its_own_prompt(policy: LMPolicy, path: str, temperature: float, top_p: float) -> None:
    changes, tolerance = PATHS[path]
    bodies = rollouts(policy, temperature, top_p, **changes)
    lengths = [len(s.completion_ids) for b in bodies for s in b.samples]
    assert len(set(lengths)) > 2  # rows end (and leave the batch) at different steps
    assert all(len({s.completion_ids for s in b.samples}) > 1 for b in bodies)  # several distinct samples per prompt
    with sampling(policy, **changes):
        for body, question in zip(bodies, QUESTIONS, strict=True):
            assert list(body.prompt_ids) == policy.prompt_ids(Task.create(question).input(0))  # under its own prompt
            for s in body.samples:
                dists = fresh_distributions(policy, body.prompt_ids, s.completion_ids, temperature)
                for token, logp, probs in zip(s.completion_ids, s.logprobs, dists, strict=True):
                    kept = nucleus(probs, top_p)
                    if token not in kept and changes.get("dtype") == "bfloat16":
                        kept = nucleus(probs, min(1.0, top_p + BF16_MASS_SLACK))  # the boundary token, moved by rounding
                    assert token in kept  # drawn from the nucleus
                    assert logp == pytest.approx(math.log(kept[token]), abs=tolerance)


#: bf16 greedy: the decoder and a fresh bf16 forward round differently, so at a near-tie (logits
#: within bf16's resolution, ~0.06 at magnitude 10) they may pick different tokens; a chosen
#: token must then be within this many logits of the fresh forward's maximum.
BF16_GREEDY_SLACK = 0.125


#: A token limit one past the first row's EOS: that row stops, the longer ones are cut at the limit.
#: (Derived, not a number: where the tiny model stops depends on the CPU kernels it was trained with.)
CUT = 0


@pytest.mark.parametrize(
    "path, max_new_tokens", [("static-fp32", 16), ("dynamic-fp32", 16), ("static-bf16", 16), ("hf-fp32", 16), ("static-fp32", CUT)]
)
def test_greedy_rows_equal_stepwise_argmax_and_end_on_eos_at_different_steps(policy: LMPolicy, path: str, max_new_tokens: int) -> None:
    """Greedy = argmax of a fresh forward (of the model the sampler ran) after each prefix the
    sampler chose: exactly in fp32, up to ``BF16_GREEDY_SLACK`` in bf16."""
    changes, _ = PATHS[path]
    slack = BF16_GREEDY_SLACK if changes.get("dtype") == "bfloat16" else 0.0
    prompts = [policy.prompt_ids(Task.create(q).input(0)) for q in QUESTIONS]
    if max_new_tokens == CUT:
        with sampling(policy, max_new_tokens=16, **changes):
            full = policy.generate(prompts, 1, greedy=True).rows()
        max_new_tokens = min(len(ids) for ids, _, stopped in full if stopped) + 1
        assert any(len(ids) > max_new_tokens for ids, _, _ in full)  # some row is cut at the limit
    with sampling(policy, max_new_tokens=max_new_tokens, **changes):
        rows = policy.generate(prompts, 1, greedy=True).rows()
        model = policy.sampling_model()
    for prompt, (ids, lps, stopped) in zip(prompts, rows, strict=True):
        assert lps == [0.0] * len(ids)
        for k, token in enumerate(ids):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([[*prompt, *ids[:k]]])).logits[0, -1].float()
            if slack:
                assert float(logits[token]) >= float(logits.max()) - slack, (k, token)
            else:
                assert token == int(logits.argmax()), (k, token)
        assert stopped == (ids[-1] in policy.eos_ids)
        assert not set(ids[:-1]) & set(policy.eos_ids)  # a row ends at its first EOS
        assert stopped or len(ids) == max_new_tokens  # ... or at the token limit
    assert any(stopped for _, _, stopped in rows) and len({len(ids) for ids, _, _ in rows}) > 1  # a row ends before others
    assert len({tuple(ids) for ids, _, _ in rows}) == len(rows)  # the continuation depends on the prompt


# --------------------------------------------------------------------------- pick vs its distribution
def seeded(rows: int, round: int) -> torch.Tensor:
    """The sampler's uniform numbers for ``rows`` samples of one input (``lm.seeding``) at token 0."""
    return Uniforms.of(ActSeed(b"reference", round, "peer"), ["input"], rows).at(torch.arange(rows), 0)


LOGITS = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0])
DRAWS = 20_000


def chi_square(counts: torch.Tensor, expected: dict[int, float]) -> float:
    return sum((float(counts[t]) - DRAWS * p) ** 2 / (DRAWS * p) for t, p in expected.items())


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.5, 1.0), (2.0, 1.0), (1.0, 0.7), (0.6, 0.9), (1.5, 0.5)])
def test_pick_draws_from_the_tempered_nucleus(temperature: float, top_p: float) -> None:
    """Chi-square at p = 0.001 against the tempered nucleus; the same counts must reject the
    untempered full softmax (the test has power against the bugs it guards)."""
    expected = nucleus(torch.softmax(LOGITS.double() / temperature, -1).tolist(), top_p)
    tokens, logps = pick(LOGITS.repeat(DRAWS, 1), temperature, top_p, False, seeded(DRAWS, 0))
    counts = torch.bincount(tokens, minlength=len(LOGITS))
    assert int(counts.sum()) == DRAWS and set(tokens.unique().tolist()) <= set(expected)  # nothing outside the nucleus
    assert chi_square(counts, expected) < CHI2_999[len(expected) - 1]
    wrong = nucleus(torch.softmax(LOGITS.double(), -1).tolist(), 1.0)
    if temperature != 1.0 or top_p < 1.0:
        assert chi_square(counts, wrong) > 10 * CHI2_999[len(wrong) - 1]
    want = torch.tensor([math.log(expected[t]) for t in tokens.tolist()])
    assert torch.allclose(logps.double(), want.double(), atol=1e-5)


def test_top_p_keeps_the_token_that_crosses_p_and_no_more() -> None:
    """Exact binary probabilities: .5 + .25 reaches top_p .75 exactly, so the nucleus is two tokens
    (as in HF's TopPLogitsWarper); .76 needs the third."""
    logits = torch.log(torch.tensor([0.5, 0.25, 0.125, 0.125])).repeat(4000, 1)
    for top_p, support in ((0.75, {0, 1}), (0.76, {0, 1, 2}), (0.5, {0})):
        tokens, logps = pick(logits, 1.0, top_p, False, seeded(len(logits), 1))
        assert set(tokens.tolist()) == support, top_p
        mass = sum((0.5, 0.25, 0.125)[: len(support)])
        assert torch.allclose(logps, torch.log(torch.tensor([0.5, 0.25, 0.125])[tokens] / mass))


def test_the_top_k_precut_draws_what_a_full_sort_draws() -> None:
    """A vocabulary larger than the pre-cut: peaked rows (their top tokens hold top_p) draw the
    same tokens from the same stream as a full sort, flat rows fall back to the full sort and
    reach tokens ranked far past the pre-cut, and every log-prob is the renormalised nucleus's."""
    from genrl_swarm.paradigms.lm.sampling import PRECUT, _from_sorted, ranked
    from genrl_swarm.paradigms.lm.sampling import nucleus as sampled_nucleus

    vocab, top_p = 4 * PRECUT, 0.9
    gen = torch.Generator().manual_seed(3)
    peaked = torch.softmax(torch.randn(64, vocab, generator=gen) * 6, -1)
    assert bool((peaked.topk(PRECUT, -1).values.sum(-1) > top_p).all())  # the pre-cut path
    fast = sampled_nucleus(peaked, top_p, seeded(len(peaked), 7))
    full = _from_sorted(*ranked(peaked), top_p, seeded(len(peaked), 7))
    assert torch.equal(fast[0], full[0]) and torch.allclose(fast[1], full[1], atol=1e-6)

    flat = torch.full((2000, vocab), 1.0 / vocab)  # the top PRECUT hold a quarter: sorted in full
    mixed = torch.cat([peaked, flat])
    tokens, logps = sampled_nucleus(mixed, top_p, seeded(len(mixed), 11))
    ranks = (mixed.argsort(dim=-1, descending=True, stable=True) == tokens[:, None]).float().argmax(-1)
    assert int(ranks[64:].max()) > 2 * PRECUT  # flat rows were not cut to the top PRECUT
    for row in (0, 1, 63, 64, 65, len(mixed) - 1):
        kept = nucleus(mixed[row].double().tolist(), top_p)
        assert int(tokens[row]) in kept
        assert math.isclose(float(logps[row]), math.log(kept[int(tokens[row])]), abs_tol=1e-4)


def test_top_p_one_draws_over_the_vocabulary_order() -> None:
    """No nucleus, no sort: the same stream as inverse-CDF over the tempered softmax."""
    from genrl_swarm.paradigms.lm.sampling import draw

    logits = LOGITS.repeat(500, 1)
    tokens, _ = pick(logits, 0.8, 1.0, False, seeded(len(logits), 3))
    assert torch.equal(tokens, draw(torch.softmax(logits / 0.8, -1), seeded(len(logits), 3)).squeeze(-1))


def test_greedy_pick_is_the_argmax_with_log_prob_zero() -> None:
    logits = torch.stack([LOGITS, LOGITS.flip(0), LOGITS.roll(3)])
    tokens, logps = pick(logits, 0.3, 0.5, True, None)
    assert tokens.tolist() == [0, 7, 3] and logps.tolist() == [0.0, 0.0, 0.0]


# --------------------------------------------------------------------------- the tiny model
def test_tiny_model_build_is_deterministic(tmp_path: Path) -> None:
    """A fresh build equals the cached one byte for byte (the cache may come from any process)."""
    from genrl_swarm.paradigms.lm.models import ensure_tiny_model
    from genrl_swarm.paradigms.lm.tiny import build_tiny_model

    cached = ensure_tiny_model()
    rng, threads = torch.get_rng_state(), torch.get_num_threads()
    build_tiny_model(tmp_path)
    assert torch.equal(torch.get_rng_state(), rng) and torch.get_num_threads() == threads  # the caller's state is left alone
    for name in ("model.safetensors", "tokenizer.json", "config.json", "chat_template.jinja"):
        assert (tmp_path / name).read_bytes() == (cached / name).read_bytes(), name


@pytest.mark.parametrize("path", ["static-fp32", "dynamic-fp32", "hf-fp32"])
def test_sampling_raises_no_deprecation_of_transformers(policy: LMPolicy, path: str) -> None:
    """The KV cache goes by the name the installed transformers takes (``cache`` since 5.x):
    the old name printed a FutureWarning on every decode step of every run."""
    import warnings

    with warnings.catch_warnings(record=True) as caught, sampling(policy, **PATHS[path][0]):
        warnings.simplefilter("always")
        policy.rollouts([Task.create(QUESTIONS[0]).input(0)])
    assert not [str(w.message) for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))]


def test_the_two_level_draw_is_exact_at_block_edges_and_never_draws_a_zero_weight_token() -> None:
    """``draw_tempered`` over a vocabulary that is not a multiple of its block (padding), with -inf
    logits, an underflowing one and tokens at block edges: chi-square against the softmax, the
    impossible tokens never drawn, and log-probs exact."""
    vocab = 2 * BLOCK + 44
    logits = torch.linspace(-3.0, 3.0, vocab).roll(7)
    logits[[0, BLOCK - 1, BLOCK, vocab - 1]] = torch.tensor([2.5, float("-inf"), -200.0, float("-inf")])
    probs = torch.softmax(logits.double(), -1)
    tokens, logps = draw_tempered(logits.repeat(20_000, 1), seeded(20_000, 3))
    counts = torch.bincount(tokens, minlength=vocab)
    assert int(counts[[BLOCK - 1, BLOCK, vocab - 1]].sum()) == 0 and int(tokens.max()) < vocab
    draws, likely = 20_000, probs > 1e-3  # cells expecting >= 20 draws
    stat = float(((counts[likely] - draws * probs[likely]) ** 2 / (draws * probs[likely])).sum())
    df = int(likely.sum()) - 1
    assert stat < df * (1 - 2 / (9 * df) + 3.09 * math.sqrt(2 / (9 * df))) ** 3  # p = 0.001 (Wilson-Hilferty)
    assert torch.allclose(logps.double(), probs.log()[tokens], atol=1e-5)


def test_pick_survives_a_tiny_temperature_bf16_logits_and_no_rows() -> None:
    logits = torch.tensor([[10.0, 9.0, -5.0], [0.0, 1.0, 2.0]])
    tokens, logps = pick(logits, 1e-38, 1.0, False, seeded(len(logits), 0))  # logits / T overflowed to inf: a crash
    assert tokens.tolist() == [0, 2] and logps.abs().max() < 1e-6  # the argmax, with probability 1
    half = logits.bfloat16()
    tokens, logps = draw_tempered(half, seeded(len(half), 0))
    assert torch.allclose(logps.double(), torch.log_softmax(half.double(), -1).gather(-1, tokens[:, None]).squeeze(-1), atol=1e-6)
    tokens, logps = pick(logits[:0], 0.7, 1.0, False, seeded(0, 0))
    assert tokens.shape == logps.shape == (0,)
