"""Seeded sampling (issue 45.2): a completion's randomness is a public function of (epoch, round,
sender, input, sample index), so its tokens are a function of the model and that key alone, and
the draws keep the sampler's distribution.

- the uniforms against an independent implementation of the specification in ``lm.seeding``,
  and their uniformity and independence across steps, indices, rounds and senders;
- a sample alone equals the same sample in another batch, after other calls, on the other KV
  path and at another thread count; another sender, round or epoch draws otherwise;
- the distribution of first tokens over many keys against the model's exact (tempered,
  nucleus) distribution, and against draws from ``torch.rand`` (the sampler before);
- the game hands the policy the epoch its commitments are signed in, before the first act.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Sequence
from dataclasses import replace

import pytest

pytest.importorskip("torch")
import torch

from genrl_swarm.comm import InMemoryBackend, InMemorySwarm
from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core import ActSeed, GameConfig, GameManager, StageInput, Task, TokenRollout
from genrl_swarm.paradigms.lm.policy import LMPolicy
from genrl_swarm.paradigms.lm.sampling import nucleus as nucleus_draw
from genrl_swarm.paradigms.lm.sampling import pick
from genrl_swarm.paradigms.lm.seeding import Uniforms, row_key, uniform

from helpers import RecordingGame

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SEED = ActSeed(bytes(range(16)), 3, "peer-a")


def chi2_999(df: int) -> float:
    """The 0.999 quantile of chi-square with ``df`` degrees of freedom (Wilson-Hilferty): a correct
    sampler fails a test 1 time in 1000; the keys are fixed, so each run is deterministic."""
    return df * (1 - 2 / (9 * df) + 3.09 * math.sqrt(2 / (9 * df))) ** 3


def chi_square(counts: Sequence[float], expected: Sequence[float]) -> float:
    return sum((c - e) ** 2 / e for c, e in zip(counts, expected, strict=True))


# --------------------------------------------------------------------------- the numbers
def test_uniforms_follow_the_written_specification() -> None:
    """An implementation from the module docstring alone, not from the module's code."""
    digest, index, step = "3f2a", 5, 17
    data = SEED.epoch + (3).to_bytes(8, "little") + (6).to_bytes(4, "little") + b"peer-a"
    data += (4).to_bytes(4, "little") + b"3f2a" + (5).to_bytes(4, "little")
    key = hashlib.blake2b(data, digest_size=32, person=b"genrl-draw-v1").digest()
    bits = int.from_bytes(hashlib.blake2b(step.to_bytes(4, "little"), digest_size=8, key=key).digest(), "little")
    assert row_key(SEED, digest, index) == key
    assert uniform(key, step) == (bits >> 11) / 2**53
    rows = Uniforms.of(SEED, ["x", digest], 6)
    assert rows.keys[6 + index] == key  # prompt-major rows: input 1, sample 5
    assert float(rows.at(torch.tensor([6 + index]), step)) == uniform(key, step)


def test_every_field_changes_the_key() -> None:
    keys = {
        row_key(SEED, "d", 0),
        row_key(SEED, "d", 1),
        row_key(SEED, "e", 0),
        row_key(replace(SEED, round=4), "d", 0),
        row_key(replace(SEED, sender="peer-b"), "d", 0),
        row_key(replace(SEED, epoch=bytes(16)), "d", 0),
        row_key(replace(SEED, sender="peer-a\x01"), "d", 0),  # length-prefixed: no field runs into the next
    }
    assert len(keys) == 7


def test_uniforms_are_uniform_and_independent() -> None:
    """200k numbers over 40 keys x 5,000 steps: 100 equal bins by chi-square, and no correlation
    between neighbouring steps, sample indices or rounds (|r| < 5 / sqrt(n))."""
    keys = Uniforms.of(SEED, ["d"], 40).keys
    u = torch.tensor([[uniform(k, t) for t in range(5000)] for k in keys], dtype=torch.float64)
    counts = torch.histc(u, bins=100, min=0.0, max=1.0)
    assert chi_square(counts.tolist(), [u.numel() / 100] * 100) < chi2_999(99)
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0

    def corr(a: torch.Tensor, b: torch.Tensor) -> float:
        a, b = a.flatten() - a.mean(), b.flatten() - b.mean()
        return float((a * b).sum() / (a.norm() * b.norm()))

    other_round = Uniforms.of(replace(SEED, round=4), ["d"], 40).keys
    v = torch.tensor([[uniform(k, t) for t in range(5000)] for k in other_round], dtype=torch.float64)
    bound = 5 / math.sqrt(u.numel() / 2)
    assert abs(corr(u[:, 1:], u[:, :-1])) < bound  # step t and t + 1
    assert abs(corr(u[1:], u[:-1])) < bound  # sample k and k + 1
    assert abs(corr(u, v)) < bound  # round 3 and round 4


# --------------------------------------------------------------------------- tokens
QUESTIONS = ("Calculate 1 + 2.", "Calculate 7 * 3.", "q", "Calculate 9 - 4.")


def inputs(*questions: str) -> list[StageInput]:
    return [Task.create(q).input(0) for q in questions]


def policy(seed: int, **sampling: object) -> LMPolicy:
    return LMPolicy("tiny-random", {"num_generations": 4, "max_new_tokens": 24, "temperature": 1.3, **sampling}, seed=seed)


def by_input(bodies: Sequence[TokenRollout]) -> dict[str, list[tuple[int, ...]]]:
    return {b.input_digest: [s.completion_ids for s in b.samples] for b in bodies}


def test_a_sample_is_a_function_of_the_model_and_its_key_alone() -> None:
    """The same body from one input alone, from a batch of four in another order, after other
    sampling calls, on the dynamic KV path, at one thread and with a nucleus of 1: rows finish at
    different steps and leave the batch in another order each time, the draws stay with them."""
    a, b = policy(1), policy(2)
    b.rollouts(inputs("warm-up"))  # another history of calls
    for p in (a, b):
        p.begin_round(SEED)
    batch = by_input(a.rollouts(inputs(*QUESTIONS)))
    assert len({len(ids) for samples in batch.values() for ids in samples}) > 2  # rows end at different steps
    assert all(len(set(samples)) > 1 for samples in batch.values())  # several distinct samples per input
    alone = by_input(b.rollouts(inputs(QUESTIONS[2])))
    assert alone.items() <= batch.items()
    reordered = by_input(b.rollouts(inputs(*reversed(QUESTIONS))))
    assert reordered == batch
    b.sampling = replace(b.sampling, kv_cache="dynamic", threads=1)
    assert by_input(b.rollouts(inputs(*QUESTIONS[:2]))).items() <= batch.items()


def test_another_sender_round_or_epoch_draws_other_tokens() -> None:
    p = policy(1)
    seen = []
    for seed in (SEED, replace(SEED, sender="peer-b"), replace(SEED, round=4), replace(SEED, epoch=bytes(16))):
        p.begin_round(seed)
        seen.append(by_input(p.rollouts(inputs(*QUESTIONS))))
    assert all(seen[0] != other for other in seen[1:])


def test_outside_a_game_each_call_draws_afresh_and_a_seed_repeats() -> None:
    """No ActSeed (benchmarks, warm-ups): calls differ from each other, the same policy seed
    replays the same sequence of calls."""
    a, b = policy(5), policy(5)
    first, second = a.rollouts(inputs(*QUESTIONS)), a.rollouts(inputs(*QUESTIONS))
    assert by_input(first) != by_input(second)
    assert b.rollouts(inputs(*QUESTIONS)) == first


# --------------------------------------------------------------------------- the distribution
def first_token_probs(p: LMPolicy, inp: StageInput, temperature: float) -> torch.Tensor:
    with torch.no_grad():
        logits = p.model(input_ids=torch.tensor([p.prompt_ids(inp)])).logits[0, -1].double()
    return torch.softmax(logits / temperature, -1)


def kept(probs: torch.Tensor, top_p: float) -> dict[int, float]:
    """The nucleus, renormalised (HF's rule: a token stays while the mass before it is < top_p)."""
    order = probs.argsort(descending=True, stable=True).tolist()
    out, mass = {}, 0.0
    for t in order:
        if mass >= top_p:
            break
        out[t], mass = float(probs[t]), mass + float(probs[t])
    return {t: q / mass for t, q in out.items()}


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (1.6, 1.0), (0.7, 0.9), (1.3, 0.6)])
def test_seeded_first_tokens_follow_the_tempered_nucleus(temperature: float, top_p: float) -> None:
    """3,000 first tokens of one input, each sample its own key (1,000 rounds x 3 indices), by
    chi-square against the model's exact distribution; cells expecting fewer than 5 are pooled."""
    p = policy(3, max_new_tokens=1, temperature=temperature, top_p=top_p)
    (inp,) = inputs(QUESTIONS[0])
    want = kept(first_token_probs(p, inp, temperature), top_p)
    keys = Uniforms(tuple(row_key(replace(SEED, round=r), inp.digest, k) for r in range(1000) for k in range(3)))
    sampled = p.generate([p.prompt_ids(inp)], len(keys.keys), uniforms=keys)  # what rollouts draws in rounds 0..999, at once
    counts: dict[int, int] = {}
    for t in sampled.ids[:, 0].tolist():
        counts[t] = counts.get(t, 0) + 1
    assert set(counts) <= set(want)  # nothing outside the nucleus
    draws = sum(counts.values())
    big = [t for t, q in want.items() if q * draws >= 5]
    observed = [counts.get(t, 0) for t in big] + [draws - sum(counts.get(t, 0) for t in big)]
    expected = [want[t] * draws for t in big] + [draws * (1 - sum(want[t] for t in big))]
    if expected[-1] < 1e-9:
        observed, expected = observed[:-1], expected[:-1]
    assert chi_square(observed, expected) < chi2_999(len(expected) - 1)


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.5, 1.0), (1.0, 0.7), (1.5, 0.5)])
def test_seeded_draws_and_torch_rand_draws_are_one_distribution(temperature: float, top_p: float) -> None:
    """``pick`` over a 64-token row with the seeded numbers and with ``torch.rand``'s (the sampler
    before): a chi-square test of homogeneity on 20,000 draws each, cells pooled below 10."""
    logits = torch.linspace(3.0, -4.0, 64).roll(5)
    rows = 20_000
    seeded = Uniforms.of(SEED, ["row"], rows).at(torch.arange(rows), 0)
    old = torch.rand((rows, 1), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    a = torch.bincount(pick(logits.repeat(rows, 1), temperature, top_p, False, seeded)[0], minlength=64).double()
    b = torch.bincount(pick(logits.repeat(rows, 1), temperature, top_p, False, old)[0], minlength=64).double()
    rare = (a + b) < 20
    a = torch.cat([a[~rare], a[rare].sum(0, keepdim=True)]) if rare.any() else a
    b = torch.cat([b[~rare], b[rare].sum(0, keepdim=True)]) if rare.any() else b
    cells = (a + b) > 0
    a, b = a[cells], b[cells]
    expected = (a + b) / 2
    stat = float(((a - expected) ** 2 / expected + (b - expected) ** 2 / expected).sum())
    assert stat < chi2_999(len(a) - 1)


def test_the_nucleus_precut_and_the_full_sort_pick_the_same_seeded_token() -> None:
    """The nucleus draws with the row's own number whichever path a row takes."""
    gen = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(64, 1024, generator=gen) * 5, -1)
    flat = torch.full((8, 1024), 1 / 1024)
    mixed = torch.cat([probs, flat])
    u = Uniforms.of(SEED, ["n"], len(mixed)).at(torch.arange(len(mixed)), 0)
    together = nucleus_draw(mixed, 0.9, u)
    apart = nucleus_draw(probs, 0.9, u[:64]), nucleus_draw(flat, 0.9, u[64:])
    assert torch.equal(together[0], torch.cat([apart[0][0], apart[1][0]]))


# --------------------------------------------------------------------------- the game
class Seeded(RecordingGame):
    """Records what the game seeds each round with."""

    def __init__(self) -> None:
        super().__init__([])
        self.seeds: list[ActSeed] = []

    def begin_round(self, seed: ActSeed) -> None:
        self.seeds.append(seed)


def test_the_game_seeds_each_round_with_the_epoch_its_commitments_sign() -> None:
    """Before the first act the epoch is already the swarm's (the in-memory board's), not the
    peer's own draw that the first exchange used to replace."""
    swarm = InMemorySwarm()
    games = {p: Seeded() for p in ("peer-a", "peer-b")}
    comms = {p: InMemoryBackend(swarm, p) for p in games}
    coordinator = LocalCoordinator()

    def run(peer: str) -> None:
        GameManager(games[peer], games[peer], games[peer], games[peer], comms[peer], coordinator, GameConfig(max_rounds=2, exchange_timeout=10)).run()

    threads = [threading.Thread(target=run, args=(p,)) for p in games]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for peer, game in games.items():
        assert game.seeds == [ActSeed(swarm.epoch.value, r, peer) for r in range(2)]
        assert comms[peer].epoch == swarm.epoch
