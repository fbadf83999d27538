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
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from dataclasses import replace

import torch
from common import machine, table

from genrl_swarm.core import ActSeed
from genrl_swarm.core.interfaces import WorkCheck
from genrl_swarm.data.digits import DigitArithmeticData
from genrl_swarm.paradigms.lm import packed as packing
from genrl_swarm.paradigms.lm.models import SMOLLM2, ensure_smollm2
from genrl_swarm.paradigms.lm.policy import LMPolicy

SETTINGS = ({"threads": 1, "pack": True}, {"threads": 2, "pack": False}, {"threads": 2, "pack": True}, {"threads": 1, "pack": False})
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
    a = p.parse_args()
    if a.pack_any_width:  # calibration on the tiny model: its senders and checks on packed kernels as well
        packing.MIN_WIDTH = 0
    model = str(ensure_smollm2()) if a.model == SMOLLM2 else a.model
    print(machine(), f"| OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} | load {os.getloadavg()[0]:.2f}")
    sampling = {"num_generations": a.generations, "max_new_tokens": a.max_new_tokens, "temperature": a.temperature, "top_p": a.top_p}
    sender, receiver = adapter_peer(model, sampling, 1), adapter_peer(model, sampling, 2)
    data, rng = DigitArithmeticData(tasks_per_round=a.questions, seed=7), random.Random(0)
    base = sender.sampling
    checks: list[WorkCheck] = []
    generate_s, sender_s, commit_s, check_s = [], [], [], []
    generate_cpu, check_cpu = [], []  # process CPU seconds: what a loaded machine does not distort (torch on one thread)
    sample_cpu = []  # ... of redoing one random sample of the body instead (trust.spot_check_samples=1)
    for r in range(a.rounds):
        inputs = [t.input(0) for t in data.round_tasks(r)]
        sender.sampling = replace(base, **SETTINGS[r % len(SETTINGS)])
        seed = ActSeed(b"bench-spot-checks", r, "sender")
        sender.begin_round(seed)
        start = time.perf_counter()
        bodies = sender.rollouts(inputs)
        sender_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        committed = sender.committed_model()
        commit_s.append(time.perf_counter() - start)
        assert committed is not None
        name, blob = committed
        receiver.begin_round(ActSeed(b"bench-spot-checks", r, "receiver"))
        start, cpu = time.perf_counter(), time.process_time()
        receiver.rollouts(inputs)
        generate_s.append(time.perf_counter() - start)
        generate_cpu.append(time.process_time() - cpu)
        for _ in range(a.peers - 1):  # each sender's k bodies, its adapter loaded anew (as from another peer)
            picks = rng.sample(bodies, a.k)
            start, cpu = time.perf_counter(), time.process_time()
            checked = receiver.check_work(seed, picks, name, blob)
            check_s.append(time.perf_counter() - start)
            check_cpu.append(time.process_time() - cpu)
            assert isinstance(checked, WorkCheck), checked
            checks.append(checked)
            cpu = time.process_time()
            one_sample = receiver.check_work(seed, picks, name, blob, [[rng.randrange(len(b.samples))] for b in picks])
            sample_cpu.append(time.process_time() - cpu)
            assert isinstance(one_sample, WorkCheck) and one_sample.mismatches == (None,) * a.k, one_sample
    tokens, ties = sum(c.tokens for c in checks), sum(c.near_ties for c in checks)
    bad = [m for c in checks for m in c.mismatches if m is not None]
    one, round_s = statistics.median(check_s), statistics.median(generate_s)
    print(f"load after {os.getloadavg()[0]:.2f}; torch threads {torch.get_num_threads()} while checking; adapter {len(blob) / 1e6:.1f} MB")
    print(table(["bodies", "mismatches", "tokens checked", "near ties", "generate a round s", "commit s", "check k bodies s",
                 "per sender / generation", f"{a.peers - 1} senders / generation"], [
        [len(checks) * a.k, len(bad), tokens, f"{ties / max(tokens + ties, 1):.4f}", f"{round_s:.2f}", f"{statistics.median(commit_s):.3f}",
         f"{one:.3f}", f"{one / round_s:.4f}", f"{(a.peers - 1) * one / round_s:.3f}"],
    ]))  # fmt: skip
    one_cpu, round_cpu = statistics.median(check_cpu), statistics.median(generate_cpu)
    print(f"CPU seconds: generate a round {round_cpu:.2f}, check k bodies {one_cpu:.3f}; per sender {one_cpu / round_cpu:.4f}, "
          f"{a.peers - 1} senders {(a.peers - 1) * one_cpu / round_cpu:.3f}")  # fmt: skip
    one_sample = statistics.median(sample_cpu)
    print(f"CPU seconds, one sample of each body (spot_check_samples=1): {one_sample:.3f}; per sender {one_sample / round_cpu:.4f}, "
          f"{a.peers - 1} senders {(a.peers - 1) * one_sample / round_cpu:.3f}")  # fmt: skip
    print(f"sender's generation on its rotating settings: median {statistics.median(sender_s):.2f}s")
    for why in bad[:5]:
        print("mismatch:", why)


if __name__ == "__main__":
    main()
