"""Spot checks (issue 45.4, the check itself): one teacher-forced pass redoes a body's seeded
draws (``lm.verify``).

- honest bodies pass: 512 bodies from fp32 samplers on 1 and 2 threads, packed and unpacked
  kernels, static and dynamic KV paths, with and without a nucleus, each checked on packed and on
  unpacked kernels (1,024 checks): no false alarm, few near ties; a model the decoder does not
  support is checked through its own forward;
- a cheater is caught by the check of one body: a best-of-n pick, tokens from another model,
  from another adapter than the one checked, and tokens from no model at all; claimed log-probs
  that are not the model's.
"""

from __future__ import annotations

import copy
import json
import math
import random
import subprocess
import sys
from dataclasses import replace

import msgspec
import pytest

pytest.importorskip("torch")
import torch

from genrl_swarm.core import ActSeed, StageInput, Task, TokenRollout, TokenSample
from genrl_swarm.paradigms.lm import packed as packing
from genrl_swarm.paradigms.lm import verify
from genrl_swarm.paradigms.lm.policy import LMPolicy
from genrl_swarm.paradigms.lm.seeding import row_key, uniform
from genrl_swarm.paradigms.lm.verify import Tolerance, Verdict, check_bodies, intervals, verdict

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SEED = ActSeed(bytes(range(16)), 5, "peer-a")
SAMPLING = {"num_generations": 4, "max_new_tokens": 12}


def inputs(count: int, salt: str = "") -> list[StageInput]:
    return [Task.create(f"Calculate {i} + {i % 7}.{salt}").input(0) for i in range(count)]


def check(
    policy: LMPolicy, bodies: list[TokenRollout], seed: ActSeed = SEED, model: object | None = None, packs: packing.PackCache | None = None
) -> list[Verdict]:
    cfg = policy.sampling
    return check_bodies(model or policy.model, bodies, seed, cfg.temperature, cfg.top_p, policy.eos_ids, packs=packs)


@pytest.mark.parametrize(
    ("changes", "temperature", "top_p"),
    [
        ({"threads": 1, "pack": True}, 1.0, 1.0),
        ({"threads": 2, "pack": False}, 1.0, 1.0),
        ({"threads": 1, "pack": False, "kv_cache": "dynamic"}, 1.3, 0.9),
        ({"threads": 2, "pack": True}, 0.7, 0.95),
    ],
)
def test_honest_bodies_pass_on_any_threads_and_kernels(
    monkeypatch: pytest.MonkeyPatch, changes: dict[str, object], temperature: float, top_p: float
) -> None:
    """128 bodies a configuration (512 in all; benchmarks/bench_spot_checks.py checks more on
    SmolLM2), each checked on the modules and on packed weights (how a receiver checks)."""
    monkeypatch.setattr(packing, "MIN_WIDTH", 0)  # the tiny model packed too
    monkeypatch.setattr(verify, "ROWS", 7)  # a nucleus's intervals in slices that cut samples apart
    sender = LMPolicy("tiny-random", {**SAMPLING, "temperature": temperature, "top_p": top_p, **changes}, seed=1)
    verdicts = []
    for r in range(2):
        seed = replace(SEED, round=r)
        sender.begin_round(seed)
        bodies = sender.rollouts(inputs(64, f" r{r}"))
        verdicts += [v for packs in (None, packing.PackCache()) for v in check(sender, bodies, seed, packs=packs)]
    bad = [v.mismatch for v in verdicts if not v.ok]
    assert not bad, bad[:3]
    tokens, ties = sum(v.tokens for v in verdicts), sum(v.near_ties for v in verdicts)
    assert tokens > 5_000 and ties <= 0.02 * (tokens + ties)  # near ties are rare
    assert max(v.worst_logprob_error for v in verdicts) < 1e-3


@pytest.fixture(scope="module")
def honest() -> LMPolicy:
    policy = LMPolicy("tiny-random", {**SAMPLING, "temperature": 1.2}, seed=1)
    policy.begin_round(SEED)
    return policy


def caught(verdicts: list[Verdict]) -> float:
    return sum(not v.ok for v in verdicts) / len(verdicts)


def test_a_best_of_n_pick_is_caught(honest: LMPolicy) -> None:
    """Each sample the longest of 8 drawn with private numbers, sent as the fair draw."""
    questions = inputs(32)
    drawn = []
    for private in range(8):
        honest.begin_round(replace(SEED, round=1000 + private))
        drawn.append(honest.rollouts(questions))
    honest.begin_round(SEED)
    bodies = []
    for k, fair in enumerate(honest.rollouts(questions)):
        candidates = [s for bodies_of_round in drawn for s in bodies_of_round[k].samples]
        best = sorted(candidates, key=lambda s: -len(s.completion_ids))[: len(fair.samples)]
        bodies.append(msgspec.structs.replace(fair, samples=tuple(best)))
    assert caught(check(honest, bodies)) == 1.0


def test_another_models_tokens_are_caught(honest: LMPolicy) -> None:
    """The right public numbers, another model's tokens and its own log-probs."""
    other = LMPolicy("tiny-random", {**SAMPLING, "temperature": 1.2}, seed=2)
    with torch.no_grad():
        for p in other.model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)) * 0.05)
    other.begin_round(SEED)
    assert caught(check(honest, other.rollouts(inputs(32)))) == 1.0


def test_another_adapter_than_the_checked_one_is_caught() -> None:
    """Two adapter peers on one base: bodies of the one checked against the other's adapter."""
    lora = {"r": 4, "alpha": 8, "target_modules": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")}
    committed, used = (LMPolicy("tiny-random", {**SAMPLING, "temperature": 1.2}, lora=lora, seed=s) for s in (1, 2))
    with torch.no_grad():
        for policy, scale in ((committed, 0.3), (used, -0.3)):
            for name, w in policy.model.named_parameters():
                if "lora_B" in name:
                    w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(len(name))) * scale)
    used.begin_round(SEED)
    bodies = used.rollouts(inputs(32))
    assert all(v.ok for v in check(used, bodies))  # honest against the adapter it used
    assert caught(check(committed, bodies)) == 1.0


def test_tokens_from_no_model_are_caught(honest: LMPolicy) -> None:
    """Plausible-looking samples from no model: random tokens, then EOS, log-probs of -1."""
    rng = random.Random(0)
    eos = honest.eos_ids[0]
    (template,) = honest.rollouts(inputs(1))
    bodies = []
    for inp in inputs(32):
        samples = []
        for _ in range(4):
            ids = (*(rng.randrange(honest.vocab_size) for _ in range(rng.randint(2, 8))), eos)
            samples.append(msgspec.structs.replace(template.samples[0], completion_ids=ids, logprobs=(-1.0,) * len(ids), finish_reason="stop"))
        bodies.append(TokenRollout(inp.task_id, inp.digest, tuple(honest.prompt_ids(inp)), tuple(samples), 0, honest.fingerprint))
    assert caught(check(honest, bodies)) == 1.0


def test_claimed_log_probs_that_are_not_the_models_are_caught(honest: LMPolicy) -> None:
    """The fair tokens with inflated behaviour log-probs (a bigger importance weight)."""
    bodies = honest.rollouts(inputs(16))
    assert all(v.ok for v in check(honest, bodies))
    lied = [
        msgspec.structs.replace(b, samples=tuple(msgspec.structs.replace(s, logprobs=tuple(x * 0.5 for x in s.logprobs)) for s in b.samples))
        for b in bodies
    ]
    verdicts = check(honest, lied)
    assert caught(verdicts) == 1.0 and all("log-prob" in (v.mismatch or "") for v in verdicts)


def test_a_wrong_key_is_a_mismatch_not_a_crash(honest: LMPolicy) -> None:
    """The same honest body checked under another round's numbers fails (the seed matters)."""
    bodies = copy.deepcopy(honest.rollouts(inputs(4)))
    assert caught(check(honest, bodies, replace(SEED, round=6))) == 1.0


def test_a_sample_redone_alone_keeps_its_own_key(honest: LMPolicy) -> None:
    """Spot checks of some samples of a body (``trust.spot_check_samples``): each is redone with the
    key of its index in the body, alone or with others; a tampered one is caught alone too."""
    honest.begin_round(SEED)
    body = honest.rollouts(inputs(1, " alone"))[0]
    cfg = honest.sampling
    (every,) = check_bodies(honest.model, [body], SEED, cfg.temperature, cfg.top_p, honest.eos_ids)
    parts = [check_bodies(honest.model, [body], SEED, cfg.temperature, cfg.top_p, honest.eos_ids, samples=[[k]])[0] for k in range(4)]
    assert every.ok and all(v.ok for v in parts)
    assert sum(v.tokens + v.near_ties for v in parts) == every.tokens + every.near_ties
    swapped = msgspec.structs.replace(body, samples=(body.samples[1], body.samples[0], *body.samples[2:]))  # each under another's key
    assert not check_bodies(honest.model, [swapped], SEED, cfg.temperature, cfg.top_p, honest.eos_ids, samples=[[0]])[0].ok
    assert check_bodies(honest.model, [swapped], SEED, cfg.temperature, cfg.top_p, honest.eos_ids, samples=[[2, 3]])[0].ok


def test_a_model_the_decoder_does_not_run_is_checked_through_its_forward(honest: LMPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
    """Architectures ``lm.decoder`` refuses: the model's own forward, the prompt once per body."""
    monkeypatch.setattr(verify, "supports", lambda model: False)
    honest.begin_round(SEED)
    bodies = honest.rollouts(inputs(8, " forward"))
    assert all(v.ok for v in check(honest, bodies))
    lied = [msgspec.structs.replace(b, samples=b.samples[::-1]) for b in bodies]  # each sample under another's key
    assert caught(check(honest, lied)) == 1.0


def test_a_nucleus_uncertain_by_rounding_admits_either_normaliser() -> None:
    """A token at the nucleus's edge (its predecessors hold top_p - 1e-5): the sender's rounding may
    have left it out, so a kept token's log-prob is over 0.9 instead of 0.95 of the mass. Honest
    either way; a claim further off is still caught (calibration: 1 false alarm in 1,024 tiny bodies)."""
    top_p, eos = 0.9, 3
    probs = torch.tensor([0.8, 0.1 - 1e-5, 0.05 + 1e-5, 0.01, 0.01, 0.01, 0.01, 0.01], dtype=torch.float64)
    seed = next(replace(SEED, round=r) for r in range(100) if 0.1 < uniform(row_key(replace(SEED, round=r), "d", 0), 0) < 0.7)
    draws = intervals(probs.log()[None], torch.tensor([0]), 1.0, top_p, Tolerance().mass)
    assert 0.05 < float(draws.slack[0]) < 0.06 and not bool(draws.edge[0])  # the third token is in or out by rounding

    def claimed(logprob: float) -> Verdict:
        body = TokenRollout("t", "d", (1, 2), (TokenSample((0,), (logprob,), "length"),), 0, "f")
        return verdict(body, {0: draws}, seed, {eos}, Tolerance())

    assert claimed(math.log(0.8 / 0.95)).ok and claimed(math.log(0.8 / (0.9 - 1e-5))).ok  # the third token in, or out
    assert not claimed(math.log(0.8 / 0.95) + 0.08).ok


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (1.3, 1.0), (0.7, 0.9)])
def test_edges_from_shared_rows_in_place_are_the_edges_of_each_tokens_own_row(temperature: float, top_p: float) -> None:
    """A teacher-forced pass hands over one row for every completion's first token (``rows``) and
    lets the edges be computed in the logits' memory (``overwrite``): the same draws, bit for bit,
    as a row per token in a fresh tensor."""
    generator = torch.Generator().manual_seed(5)
    logits = torch.randn(4, 1000, generator=generator) * 3  # 1000: not a multiple of sampling.BLOCK
    rows = torch.tensor([0, 1, 2, 0, 3, 0])
    tokens = torch.tensor([7, 999, 0, 256, 511, 7])
    each = intervals(logits[rows], tokens, temperature, top_p, Tolerance().mass)
    with torch.inference_mode():
        shared = intervals(logits.clone(), tokens, temperature, top_p, Tolerance().mass, True, rows)
    for a, b in zip(
        (each.lo, each.hi, each.logprob, each.edge, each.slack), (shared.lo, shared.hi, shared.logprob, shared.edge, shared.slack), strict=True
    ):
        assert torch.equal(a, b)


def one_pass_edges(logits: torch.Tensor, tokens: torch.Tensor, temperature: float, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``verify.tempered``'s arithmetic as it ran before the rows were taken in groups: each step over
    all rows at once (the reference the grouped version must equal bit for bit)."""
    scaled = logits.clone()
    if temperature != 1.0:
        scaled = (scaled - scaled.amax(-1, keepdim=True)) / temperature
    height, vocab = scaled.shape
    top = scaled.amax(-1, keepdim=True)
    own = scaled[rows, tokens].double()
    weights = (scaled - top).exp_()
    if vocab % verify.BLOCK:
        weights = torch.nn.functional.pad(weights, (0, verify.BLOCK - vocab % verify.BLOCK))
    blocks = weights.view(height, -1, verify.BLOCK)
    cdf = blocks.sum(-1).double().cumsum(-1)[rows]
    total = cdf[:, -1]
    block, column = tokens // verify.BLOCK, tokens % verify.BLOCK
    mine = torch.arange(len(tokens))
    earlier = torch.where(block > 0, cdf[mine, (block - 1).clamp(min=0)], torch.zeros_like(total))
    inner = blocks[rows, block].cumsum(-1, dtype=torch.float64)
    lo = earlier + torch.where(column > 0, inner[mine, (column - 1).clamp(min=0)], torch.zeros_like(total))
    hi = earlier + inner[mine, column]
    return lo / total, hi / total, own - top[rows, 0].double() - total.log()


@pytest.mark.parametrize("vocab", [512 * verify.BLOCK // 8, 1000])
@pytest.mark.parametrize("temperature", [1.0, 1.3, 0.7])
@pytest.mark.parametrize("height", [1, verify.EDGE_ROWS, 2 * verify.EDGE_ROWS + 1])
def test_edges_taken_a_few_rows_at_a_time_are_the_edges_of_all_rows_at_once(vocab: int, temperature: float, height: int) -> None:
    """``tempered`` scales, exponentiates and sums ``EDGE_ROWS`` rows at a time (each group while
    it is in the cache): the same bits as each step over every row at once, whichever rows the
    tokens were drawn from (shared, out of order) and whether or not the vocabulary fills its blocks."""
    generator = torch.Generator().manual_seed(vocab + height)
    logits = torch.randn(height, vocab, generator=generator) * 3
    rows = torch.cat([torch.randperm(height, generator=generator), torch.randint(0, height, (5,), generator=generator)])
    tokens = torch.randint(0, vocab, (len(rows),), generator=generator)
    tokens[0], tokens[-1] = 0, vocab - 1
    expected = one_pass_edges(logits, tokens, temperature, rows)
    for overwrite in (False, True):
        with torch.inference_mode():
            given = logits.clone()
            draws = verify.tempered(given, tokens, temperature, overwrite, rows)
        for a, b in zip(expected, (draws.lo, draws.hi, draws.logprob), strict=True):
            assert torch.equal(a, b)
        assert torch.equal(given, logits) != overwrite  # only an overwrite writes into the caller's logits


def test_a_header_nested_past_the_stack_is_refused_where_a_library_raised_the_recursion_limit() -> None:
    """py-evm and py_ecc (the contract coordinator's) raise Python's recursion limit on import;
    json's C decoder then overflowed the C stack on a header nested 200,000 deep: the receiving
    process died of SIGSEGV. The reader measures the nesting first (a child process: a crash here
    must not take the suite with it)."""
    code = (
        "import sys; sys.setrecursionlimit(10**6)\n"
        "from genrl_swarm.paradigms.lm.model_digest import _layout\n"
        "deep = b'{\"a\":' + b'[' * 200_000 + b']' * 200_000 + b'}'\n"
        "print(_layout(len(deep).to_bytes(8, 'little') + deep))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "None", (out.returncode, out.stderr[-500:])


def test_the_nesting_read_without_recursion_is_jsons_own() -> None:
    """``model_digest._nesting`` on 2,000 random JSON documents (strings full of brackets, quotes,
    backslashes and non-ASCII) equals the documents' depth: brackets inside strings never count."""
    from genrl_swarm.paradigms.lm.model_digest import _nesting

    rng, alphabet = random.Random(0), ["[", "]", "{", "}", '"', "\\", "a", " ", "é", "\n"]

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))

    def value(levels: int) -> object:
        if levels == 0 or rng.random() < 0.3:
            return rng.choice([text(), rng.randint(-5, 5), None, True])
        if rng.random() < 0.5:
            return [value(levels - 1) for _ in range(rng.randint(0, 3))]
        return {text(): value(levels - 1) for _ in range(rng.randint(0, 3))}

    def depth(x: object) -> int:
        inner = x if isinstance(x, list) else list(x.values()) if isinstance(x, dict) else None
        return 0 if inner is None else 1 + max((depth(v) for v in inner), default=0)

    for _ in range(1000):
        doc = value(6)
        for ascii_only in (True, False):
            assert _nesting(json.dumps(doc, ensure_ascii=ascii_only).encode()) == depth(doc)


def header_blob(header: dict[str, object], data: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data


def test_an_adapter_is_hashed_and_loaded_from_its_own_bytes() -> None:
    """A receiver hashes a well-formed adapter's bytes where they lie and copies them into its
    slots (``model_digest._layout``): the digest and tensors are those of safetensors' own load; any
    other bytes are refused, and the library never reads them (the Standards: a stranger's bytes
    reach no parser we did not write)."""
    from safetensors.torch import load, save

    from genrl_swarm.paradigms.lm import model_digest

    generator = torch.Generator().manual_seed(3)
    tensors = {"b.weight": torch.randn(4, 3, generator=generator), "a.weight": torch.randn(2, 5, generator=generator)}
    tensors["c.half"] = torch.randn(3, generator=generator).to(torch.bfloat16)
    tensors["empty"] = torch.zeros(0, 4)
    for blob in (save(tensors), save(tensors, metadata={"format": "pt"})):
        digest = model_digest.tensors_digest(load(blob))
        assert digest == model_digest.tensors_digest(tensors) and model_digest._layout(blob) is not None
        slots = {k: torch.full_like(v, 7.0) for k, v in tensors.items()}
        versions = {k: v._version for k, v in slots.items()}
        model_digest.load_adapter(None, blob, digest, slots)
        assert all(torch.equal(slots[k], v) for k, v in tensors.items())
        assert all(v._version > versions[k] for k, v in slots.items())  # written as copy_ writes: caches keyed on versions see it
        with pytest.raises(ValueError, match="do not hash"):
            model_digest.load_adapter(None, blob, "0" * 64, slots)
        with pytest.raises(ValueError, match="does not fit"):
            model_digest.load_adapter(None, blob, digest, {**slots, "a.weight": torch.zeros(5, 2)})
    blob = save(tensors)
    size = int.from_bytes(blob[:8], "little")
    header = blob[8 : 8 + size]
    repeated = header.replace(b'"b.weight"', b'"a.weight"')
    for odd in (
        blob + b"\0",  # bytes past the last tensor
        blob[:-1],  # short of it
        blob[:8] + repeated + blob[8 + size :],  # a name twice
        blob[:8] + header.replace(b'"F32"', b'"F8_E4M3"', 1) + blob[8 + size :],  # a dtype read only by the library
        b"not safetensors",
        header_blob({"w": {"dtype": "F32", "shape": [10**4000] * 500 + [0], "data_offsets": [0, 0]}}),  # a product that takes seconds
        header_blob({"w": {"dtype": "F32", "shape": [0, 2**64], "data_offsets": [0, 0]}}),  # a dimension past 64 bits
        header_blob({"w": {"dtype": "F32", "shape": [1] * 9, "data_offsets": [0, 4]}}, b"\0" * 4),  # more dimensions than an adapter has
        (8).to_bytes(8, "little") + '{"a":1}'.encode("utf-16-le")[:8],  # not UTF-8 (json.loads of bytes would guess UTF-16)
        len(deep := b'{"a":' + b"[" * 200_000 + b"]" * 200_000 + b"}").to_bytes(8, "little") + deep,  # nested past the stack
    ):
        assert model_digest._layout(odd) is None
        with pytest.raises(ValueError, match="not a safetensors"):
            model_digest.load_adapter(None, odd, model_digest.tensors_digest(tensors), {k: torch.empty_like(v) for k, v in tensors.items()})
