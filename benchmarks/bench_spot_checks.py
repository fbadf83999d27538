"""Spot checks on SmolLM2 (issue 45.4): false alarms, near ties, and what checking costs a receiver
against its own generation, per round, at the default k.

Adapter peers on one shared fp32 base (LoRA r=8 on every projection, the adapters moved off peft's
zeros). Each round a sender samples the round's questions on other settings in turn (1 or 2
threads, packed or unpacked kernels: "honest peers on other thread counts and kernels") and
commits its model (``LMPolicy.committed_model``: the digests and the adapter's bytes, timed); the
receiver samples the same round on its own defaults (its generation time), then checks ``k``
bodies of each of ``--peers - 1`` senders as ``core.spot_checks`` does: the sender's adapter loaded
from its bytes onto the receiver's base, one teacher-forced pass (``LMPolicy.check_work``). The
adapter comes from this process's memory (the in-memory transport's fetch); on HiveMind add the
transfer of its bytes. Reported: bodies checked, mismatches (false alarms: must be 0), the share
of tokens skipped as near ties, the largest log-prob error, seconds per round, and checking as a
share of the receiver's generation, per sender and for the whole swarm, in wall and in CPU seconds
(torch on one thread: CPU seconds are what a loaded machine does not distort), and the same for
redoing one random sample of each body (``trust.spot_check_samples=1``).

    OMP_NUM_THREADS=1 python benchmarks/bench_spot_checks.py --model HuggingFaceTB/SmolLM2-135M-Instruct --rounds 8

False alarms on many bodies (every body of every round checked, one sender):

    OMP_NUM_THREADS=1 python benchmarks/bench_spot_checks.py --pack-any-width --questions 32 --rounds 32 --peers 2 --k 32

... and on SmolLM2, in chunks that add up (each ``--seed`` draws other questions, adapters and
public numbers; ``--checks-only`` measures no costs, so the receiver does not generate):

    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE python benchmarks/bench_spot_checks.py \
        --model HuggingFaceTB/SmolLM2-135M-Instruct --rounds 12 --peers 2 --k 8 --checks-only --seed 101

``OMP_WAIT_POLICY=PASSIVE`` on a shared, loaded machine: the sender's two-thread rounds took
150-330 s with OpenMP's spinning waits (load 8-11 on 2 cores) and about 20 s without; the wait
policy does not change what a thread computes, only how it waits.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import torch
from common import machine, table

from genrl_swarm.core import ActSeed
from genrl_swarm.core.interfaces import WorkCheck
from genrl_swarm.data.digits import DigitArithmeticData
from genrl_swarm.paradigms.lm import packed as packing
from genrl_swarm.paradigms.lm.models import SMOLLM2, ensure_smollm2
from genrl_swarm.paradigms.lm.policy import LMPolicy

SETTINGS = ({"threads": 1, "pack": True}, {"threads": 2, "pack": False}, {"threads": 2, "pack": True}, {"threads": 1, "pack": False})
T = TypeVar("T")
LORA = {"r": 8, "alpha": 16, "target_modules": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")}


def adapter_peer(model: str, sampling: dict[str, object], seed: int, device: str = "auto", dtype: str = "auto") -> LMPolicy:
    """An adapter peer whose adapter is drawn from ``seed`` (moved off peft's zeros), the same on any device."""
    policy = LMPolicy(model, sampling, lora=LORA, device=device, dtype=dtype, seed=seed)
    with torch.no_grad():
        for name, w in policy.model.named_parameters():
            if "lora_B" in name:
                noise = torch.randn(w.shape, generator=torch.Generator().manual_seed(seed * 1000 + len(name))) * 0.01
                w.add_(noise.to(w.device, w.dtype))
    return policy


def seeds(seed: int) -> tuple[bytes, int, int, int]:
    """(epoch, data seed, sender's adapter seed, receiver's) of run ``seed``: runs of other seeds
    draw other questions, adapters and public numbers, so their bodies add up (seed 0: the runs
    before the option)."""
    epoch = b"bench-spot-checks" if seed == 0 else f"bench-spot-checks-{seed}".encode()
    return epoch, 7 + seed, 1 + 2 * seed, 2 + 2 * seed


@dataclass
class Tally:
    """What the rounds measured: every check, and seconds (wall and process CPU: torch on one thread,
    CPU seconds are what a loaded machine does not distort)."""

    checks: list[WorkCheck] = field(default_factory=list)
    one_sample: list[WorkCheck] = field(default_factory=list)  # ... redoing one random sample of each body
    generate_s: list[float] = field(default_factory=list)
    generate_cpu: list[float] = field(default_factory=list)
    sender_s: list[float] = field(default_factory=list)
    commit_s: list[float] = field(default_factory=list)
    check_s: list[float] = field(default_factory=list)
    check_cpu: list[float] = field(default_factory=list)
    sample_cpu: list[float] = field(default_factory=list)


def timed(tally: list[float], cpu: list[float] | None, call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, its wall seconds appended to ``tally`` and its process CPU seconds to ``cpu``."""
    start, used = time.perf_counter(), time.process_time()
    out = call(*args)
    tally.append(time.perf_counter() - start)
    if cpu is not None:
        cpu.append(time.process_time() - used)
    return out


def play_round(
    a: argparse.Namespace, r: int, sender: LMPolicy, receiver: LMPolicy, data: DigitArithmeticData, rng: random.Random, tally: Tally
) -> None:
    """Round ``r``: the sender samples on the round's kernels and commits; the receiver samples on
    its own defaults (unless ``--checks-only``) and checks ``k`` bodies of each sender."""
    epoch = seeds(a.seed)[0]
    inputs = [t.input(0) for t in data.round_tasks(r)]
    sender.sampling = replace(sender.sampling, **SETTINGS[r % len(SETTINGS)])
    seed = ActSeed(epoch, r, "sender")
    sender.begin_round(seed)
    bodies = timed(tally.sender_s, None, sender.rollouts, inputs)
    committed = timed(tally.commit_s, None, sender.committed_model)
    assert committed is not None
    name, blob = committed
    if not a.checks_only:
        receiver.begin_round(ActSeed(epoch, r, "receiver"))
        timed(tally.generate_s, tally.generate_cpu, receiver.rollouts, inputs)
    for _ in range(a.peers - 1):  # each sender's k bodies, its adapter loaded anew (as from another peer)
        picks = rng.sample(bodies, a.k)
        checked = timed(tally.check_s, tally.check_cpu, receiver.check_work, seed, picks, name, blob)
        assert isinstance(checked, WorkCheck), checked
        tally.checks.append(checked)
        if not a.checks_only:
            samples = [[rng.randrange(len(b.samples))] for b in picks]
            one = timed([], tally.sample_cpu, receiver.check_work, seed, picks, name, blob, samples)
            assert isinstance(one, WorkCheck), one
            tally.one_sample.append(one)


def progress(r: int, tally: Tally) -> None:
    """One line a round, with the running totals: a run stopped early still counts its rounds."""
    bad = sum(m is not None for c in tally.checks for m in c.mismatches)
    tokens, ties = sum(c.tokens for c in tally.checks), sum(c.near_ties for c in tally.checks)
    bodies = sum(len(c.mismatches) for c in tally.checks)
    print(
        f"round {r} {SETTINGS[r % len(SETTINGS)]}: sender {tally.sender_s[-1]:.1f}s; so far {bodies} bodies, {tokens} tokens, "
        f"{ties} near ties, {bad} mismatches; load {os.getloadavg()[0]:.2f}",
        flush=True,
    )


def report(a: argparse.Namespace, tally: Tally, adapter_bytes: int) -> None:
    """False alarms (mismatches: must be 0) and near ties; unless ``--checks-only``, what checking
    costs against the receiver's generation."""
    checks = tally.checks
    tokens, ties = sum(c.tokens for c in checks), sum(c.near_ties for c in checks)
    bad = [m for c in checks for m in c.mismatches if m is not None]
    bad_one = [m for c in tally.one_sample for m in c.mismatches if m is not None]
    print(f"load after {os.getloadavg()[0]:.2f}; torch threads {torch.get_num_threads()} while checking; adapter {adapter_bytes / 1e6:.1f} MB")
    print(f"seed {a.seed}: {len(checks) * a.k} bodies, {len(bad)} mismatches, {tokens} tokens checked, {ties} near ties "
          f"({ties / max(tokens + ties, 1):.4f}); one random sample of each redone alone: {len(tally.one_sample) * a.k} bodies, "
          f"{len(bad_one)} mismatches")  # fmt: skip
    if not a.checks_only:
        costs(a, tally)
    print(f"sender's generation on its rotating settings: median {statistics.median(tally.sender_s):.2f}s; "
          f"check of k bodies median {statistics.median(tally.check_s):.3f}s")  # fmt: skip
    for why in (bad + bad_one)[:5]:
        print("mismatch:", why)


def costs(a: argparse.Namespace, tally: Tally) -> None:
    """Checking as a share of the receiver's generation, per sender and for ``--peers - 1`` of them."""
    one, round_s = statistics.median(tally.check_s), statistics.median(tally.generate_s)
    print(table(["generate a round s", "commit s", "check k bodies s", "per sender / generation", f"{a.peers - 1} senders / generation"], [
        [f"{round_s:.2f}", f"{statistics.median(tally.commit_s):.3f}", f"{one:.3f}", f"{one / round_s:.4f}", f"{(a.peers - 1) * one / round_s:.3f}"],
    ]))  # fmt: skip
    one_cpu, round_cpu = statistics.median(tally.check_cpu), statistics.median(tally.generate_cpu)
    print(f"CPU seconds: generate a round {round_cpu:.2f}, check k bodies {one_cpu:.3f}; per sender {one_cpu / round_cpu:.4f}, "
          f"{a.peers - 1} senders {(a.peers - 1) * one_cpu / round_cpu:.3f}")  # fmt: skip
    one_sample = statistics.median(tally.sample_cpu)
    print(f"CPU seconds, one sample of each body (spot_check_samples=1): {one_sample:.3f}; per sender {one_sample / round_cpu:.4f}, "
          f"{a.peers - 1} senders {(a.peers - 1) * one_sample / round_cpu:.3f}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--questions", type=int, default=8)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--k", type=int, default=1, help="bodies checked per sender and stage (trust.spot_checks)")
    p.add_argument("--peers", type=int, default=8, help="swarm size: the receiver checks peers - 1 senders a round")
    p.add_argument("--pack-any-width", action="store_true", help="pack models narrower than lm.packed.MIN_WIDTH too (the tiny model)")
    p.add_argument("--seed", type=int, default=0, help="questions, adapters and public numbers: runs of other seeds add up")
    p.add_argument("--checks-only", action="store_true", help="false alarms only: no receiver generation, no one-sample redo, no costs")
    a = p.parse_args()
    if a.pack_any_width:  # calibration on the tiny model: its senders and checks on packed kernels as well
        packing.MIN_WIDTH = 0
    model = str(ensure_smollm2()) if a.model == SMOLLM2 else a.model
    print(machine(), f"| OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} | load {os.getloadavg()[0]:.2f}")
    sampling = {"num_generations": a.generations, "max_new_tokens": a.max_new_tokens, "temperature": a.temperature, "top_p": a.top_p}
    _, data_seed, sender_seed, receiver_seed = seeds(a.seed)
    sender, receiver = adapter_peer(model, sampling, sender_seed), adapter_peer(model, sampling, receiver_seed)
    data, rng, tally = DigitArithmeticData(tasks_per_round=a.questions, seed=data_seed), random.Random(a.seed), Tally()
    for r in range(a.rounds):
        play_round(a, r, sender, receiver, data, rng, tally)
        progress(r, tally)
    committed = sender.committed_model()
    report(a, tally, len(committed[1]) if committed is not None else 0)


if __name__ == "__main__":
    main()
