"""Spot checks on SmolLM2 (issue 45.4): false alarms, near ties and cost against generation.

A sender samples rounds of the digits demo's shape (8 questions x 8 completions, fp32), each
round on other settings in turn: 1 or 2 threads, packed or unpacked kernels (the sender's side
of "honest peers on other thread counts and kernels"); a receiver on its own defaults checks
every body with one teacher-forced pass (``lm.verify.check_bodies``). Reported: bodies checked,
mismatches (false alarms: must be 0), the share of tokens skipped as near ties, the largest
log-prob error, and the time of checking one body against the time of generating the round.

    OMP_NUM_THREADS=2 python benchmarks/bench_spot_checks.py --model HuggingFaceTB/SmolLM2-135M-Instruct --rounds 16
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace

import torch
from common import machine, table

from genrl_swarm.core import ActSeed
from genrl_swarm.data.digits import DigitArithmeticData
from genrl_swarm.paradigms.lm.policy import LMPolicy
from genrl_swarm.paradigms.lm.verify import check_bodies

SETTINGS = ({"threads": 1, "pack": True}, {"threads": 2, "pack": False}, {"threads": 2, "pack": True}, {"threads": 1, "pack": False})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--questions", type=int, default=8)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    a = p.parse_args()
    print(machine(), f"| OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} | load {os.getloadavg()[0]:.2f}")
    sampling = {"num_generations": a.generations, "max_new_tokens": a.max_new_tokens, "temperature": a.temperature, "top_p": a.top_p}
    sender = LMPolicy(a.model, sampling, seed=1)
    data = DigitArithmeticData(tasks_per_round=a.questions, seed=7)
    base = sender.sampling
    verdicts, generate_s, check_s = [], [], []
    for r in range(a.rounds):
        sender.sampling = replace(base, **SETTINGS[r % len(SETTINGS)])
        seed = ActSeed(b"bench-spot-checks", r, "sender")
        sender.begin_round(seed)
        inputs = [t.input(0) for t in data.round_tasks(r)]
        start = time.perf_counter()
        bodies = sender.rollouts(inputs)
        generate_s.append(time.perf_counter() - start)
        for body in bodies:  # one body a check: k = 1 per sender, as a receiver spends it
            start = time.perf_counter()
            verdicts += check_bodies(sender.model, [body], seed, a.temperature, a.top_p, sender.eos_ids)
            check_s.append(time.perf_counter() - start)
    tokens, ties = sum(v.tokens for v in verdicts), sum(v.near_ties for v in verdicts)
    bad = [v.mismatch for v in verdicts if not v.ok]
    one, round_s = statistics.median(check_s), statistics.median(generate_s)
    print(f"load after {os.getloadavg()[0]:.2f}; torch threads {torch.get_num_threads()} while checking")
    print(table(["bodies", "mismatches", "tokens checked", "near ties", "max |d log-prob|", "check one body s", "generate a round s", "one check / round"], [
        [len(verdicts), len(bad), tokens, f"{ties / max(tokens + ties, 1):.4f}", f"{max(v.worst_logprob_error for v in verdicts):.2e}",
         f"{one:.3f}", f"{round_s:.2f}", f"{one / round_s:.4f}"],
    ]))  # fmt: skip
    for why in bad[:5]:
        print("mismatch:", why)


if __name__ == "__main__":
    main()
