"""Spot checks across devices and precisions (issue 45): does an honest GPU peer pass a CPU peer's
check, and the other way round?

``lm.verify``'s tolerance is calibrated for fp32 samplers on CPUs (1 or 2 threads, packed or not).
A swarm mixes machines: a sender on a GPU draws its tokens through cuBLAS kernels (fp32, TF32 when
the user enables it, or bf16 weights, which ``dtype=auto`` picks on a GPU), and any receiver may
check them on its CPU, or the other way round. A false alarm is a proof against an honest peer:
every honest peer that re-checks it quarantines the sender. This runs every pairing of senders and
receivers below on adapter peers (LoRA r=8 on every projection, the same adapter weights on every
peer) through the real path (``committed_model`` -> ``check_work``), and reports per pair: bodies
checked, mismatches (false alarms), the reason when the receiver cannot check at all (another base
digest: bf16 weights hash differently), the near-tie share, and on the GPU what checking one body
costs against generating the round.

    python benchmarks/bench_spot_checks_devices.py --model tiny-random --out runs/devices.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch
from bench_spot_checks import adapter_peer
from common import machine

from genrl_swarm.core import ActSeed
from genrl_swarm.core.interfaces import WorkCheck
from genrl_swarm.data.digits import DigitArithmeticData
from genrl_swarm.paradigms.lm.models import SMOLLM2, ensure_smollm2
from genrl_swarm.paradigms.lm.policy import LMPolicy


@dataclass(frozen=True)
class Setting:
    """Where and in what precision a peer runs."""

    name: str
    device: str
    dtype: str
    tf32: bool = False


SETTINGS = (
    Setting("cpu-fp32", "cpu", "float32"),
    Setting("cuda-fp32", "cuda", "float32"),
    Setting("cuda-tf32", "cuda", "float32", tf32=True),
    Setting("cuda-bf16", "cuda", "bfloat16"),
    Setting("cpu-bf16", "cpu", "bfloat16"),
)


@contextmanager
def matmul_precision(tf32: bool) -> Iterator[None]:
    """TF32 matmuls (``torch.backends.cuda.matmul.allow_tf32``) on or off for the block."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--questions", type=int, default=16)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--out", default="runs/spot_checks_devices.jsonl")
    a = p.parse_args()
    model = str(ensure_smollm2()) if a.model in (SMOLLM2, "smollm2") else a.model
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(machine(), gpu, f"torch {torch.__version__}", f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}",
          f"torch threads {torch.get_num_threads()}", flush=True)  # fmt: skip
    sampling = {"num_generations": a.generations, "max_new_tokens": a.max_new_tokens, "temperature": 1.0}
    settings = [s for s in SETTINGS if s.device == "cpu" or torch.cuda.is_available()]
    if len(settings) < len(SETTINGS):
        print("no CUDA device: CPU settings only (a smoke run; the point of this benchmark is a GPU)", flush=True)
    peers = {s.name: adapter_peer(model, sampling, 1, s.device, s.dtype) for s in settings}  # one adapter on every device
    data = DigitArithmeticData(tasks_per_round=a.questions, seed=7)
    rounds = []  # per round: (seed, {sender: (bodies, committed, seconds)})
    for r in range(a.rounds):
        inputs = [t.input(0) for t in data.round_tasks(r)]
        seed = ActSeed(b"bench-devices", r, "sender")
        drawn = {}
        for s in settings:
            policy = peers[s.name]
            policy.begin_round(seed)
            with matmul_precision(s.tf32):
                sync()
                start = time.perf_counter()
                bodies = policy.rollouts(inputs)
                sync()
                took = time.perf_counter() - start
            drawn[s.name] = (bodies, policy.committed_model(), took)
        rounds.append((seed, drawn))
    with open(a.out, "a") as out:
        for sender in settings:
            for receiver in settings:
                row = json.dumps(asdict(pair(a.model, rounds, sender, peers[receiver.name], receiver)))
                print(row, flush=True)
                out.write(row + "\n")


@dataclass
class Pair:
    """One (sender, receiver) pairing's result."""

    model: str
    sender: str
    receiver: str
    bodies: int = 0
    mismatches: int = 0
    tokens: int = 0
    near_ties: int = 0
    unchecked: str | None = None  # why the receiver could not check at all
    error: str | None = None
    first_mismatch: str | None = None
    check_body_s: float | None = None  # median seconds to check one body
    receiver_round_s: float | None = None  # median seconds the receiver takes to generate a round


def pair(model: str, rounds: list, sender: Setting, receiver: LMPolicy, where: Setting) -> Pair:
    """Every body ``sender`` drew, checked by ``receiver`` (one body per call, as a spot check)."""
    out = Pair(model, sender.name, where.name)
    check_s = []
    for seed, drawn in rounds:
        bodies, committed, _ = drawn[sender.name]
        if committed is None:
            out.unchecked = "the sender commits no model (committed_model() is None)"
            break
        name, blob = committed
        for body in bodies:
            sync()
            start = time.perf_counter()
            try:
                with matmul_precision(False):
                    checked = receiver.check_work(seed, [body], name, blob)
            except Exception as e:  # noqa: BLE001 - a benchmark row records what broke
                out.error = f"{type(e).__name__}: {e}"[:300]
                return out
            sync()
            check_s.append(time.perf_counter() - start)
            if not isinstance(checked, WorkCheck):
                out.unchecked = checked
                return out
            out.bodies, out.tokens, out.near_ties = out.bodies + 1, out.tokens + checked.tokens, out.near_ties + checked.near_ties
            if checked.mismatches[0] is not None:
                out.mismatches += 1
                out.first_mismatch = out.first_mismatch or checked.mismatches[0]
    if check_s:
        out.check_body_s = statistics.median(check_s)
        out.receiver_round_s = statistics.median(drawn[where.name][2] for _, drawn in rounds)
    return out


if __name__ == "__main__":
    main()
