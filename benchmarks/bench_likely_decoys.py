"""A hostile review's flood of the SAPO draw (issue 42): decoy groups the receiver finds likely.

The draw now ranks competing swarm groups by the receiver's value, gain x closeness
(``lm/swarm_value.py``): gain, the group's best reward above the receiver's own mean for the
prompt; closeness, the receiver's geometric-mean per-token probability of that best completion.
Closeness is a per-token mean, so a completion whose rewarded first token is only fairly likely
(the decoy, ~0.16 on the untrained tiny model) but whose tail is the base model's likeliest
continuation (per-token probabilities 0.65, 0.18, 0.999, 0.99, 0.97) scores ~0.5, while an honest
completion that starts with the target (often ~0.005-0.05 early on) followed by a sampled tail
scores less. Early on, with the receiver's own mean ~0.1, (0.5 - 0.1) x 0.5 beats (1 - 0.1) x c
for the honest target groups whenever c < ~0.22: the adversary's decoy groups take the slots the
honest target groups would have had, and push the decoy (the locally good answer) while the
honest peers have not found the target yet.

The adversary knows the public base model: for each prompt it beam-searches the likeliest
6-token completions starting with the decoy and with a zero-reward digit (no EOS inside), and
each of its 3 ids sends, for every task, two likely decoy completions (the likeliest, and an
id-specific one) and an id-specific likely zero-reward completion (so no body copies another
id's). Every id's best completion for a prompt is the same, so its ids' groups tie with each
other exactly and fill as many slots as it has ids once its value beats the honest groups'.

Against the draw that ranked by gain x closeness, with ``num_external`` 4 (real recipes use 2-8),
over seed sets 0-7, load 3-6, OMP_NUM_THREADS=1: 10.6% +- 8.5% (per seed set 3.6, 11.3, 0.6, 17.4, 10.4, 5.9, 27.6, 7.9). The same shape's other
forms (num_external 4): one likely decoy + an id-specific zero-reward tail, 1 id 3.9% +- 5.3%,
3 ids 9.8% +- 10.1%, 4 ids 7.9%, 6 ids 8.0%, 9 ids 7.9% +- 9.7%; one likely decoy + a likely zero,
3 ids 10.1% +- 9.5%, 9 ids 8.2%; with num_external 12 and 9 ids 5.7% +- 5.1%; with num_external
2 (3 ids) 3.6% +- 8.1%. It is a borderline break (the best of about a dozen forms tried, its
standard error ~3 points), but it was above the goal's 10% with 3 ids. The draw now ranks by gain
first and by closeness only between equal gains: 1.9% +- 5.3% (per seed set 1.9, -4.8, -0.0,
12.9, 0.1, 1.3, 5.3, -1.4; 2026-11-28, load 2-3). ``tests/test_swarm_value.py`` attacks the rule
itself in a second; this is the 8-seed-set measurement (3-4 minutes).

    OMP_NUM_THREADS=1 python benchmarks/bench_likely_decoys.py [--ids 3] [--num-external 4] [--seeds 8]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
import warnings
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import msgspec
import torch
from common import machine

from genrl_swarm.core import StageInput, TokenRollout, TokenSample
from genrl_swarm.paradigms.lm.policy import LMPolicy

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from helpers import grpo_swarm  # noqa: E402

LENGTH, WIDTH, K = 6, 6, 16


@cache
def base() -> LMPolicy:
    """The public base model (what every peer starts from), frozen: the adversary's copy."""
    return grpo_swarm.policy(0, 999)


@torch.no_grad()
def next_logps(prefix: Sequence[int]) -> torch.Tensor:
    pol = base()
    return torch.log_softmax(pol.model(torch.tensor([list(prefix)])).logits[0, -1].float() / pol.sampling.temperature, -1)


@cache
def likely(prompt: tuple[int, ...], first: int) -> list[tuple[int, ...]]:
    """The K completions starting with ``first`` (up to LENGTH tokens, no EOS) with the highest
    mean log-prob under the base model (a beam search of width WIDTH)."""
    start = ((first,), float(next_logps(prompt)[first]))
    beams, done = [start], [start]
    for _ in range(LENGTH - 1):
        grown = []
        for ids, logp in beams:
            step = next_logps(prompt + ids)
            step[2] = -1e9  # no EOS inside a completion
            top = torch.topk(step, WIDTH)
            grown += [(ids + (t,), logp + v) for v, t in zip(top.values.tolist(), top.indices.tolist())]
        grown.sort(key=lambda x: -x[1])
        beams = grown[: max(WIDTH, K)]
        done += beams
    done.sort(key=lambda x: -x[1] / len(x[0]))
    return [ids for ids, _ in done[:K]]


class LikelyDecoyFlooder(LMPolicy):
    """Per task: the likeliest decoy completion, an id-specific likely decoy completion and an
    id-specific likely zero-reward completion."""

    def __init__(self, *args: object, index: int, roles: grpo_swarm.Tokens, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.index, self.roles = index, roles

    def rollouts(self, inputs: Sequence[StageInput], greedy: bool = False) -> list[TokenRollout]:
        honest = super().rollouts(inputs, greedy)
        if greedy or self.act_seed is None:
            return honest
        out = []
        for body in honest:
            decoys, zeros = likely(tuple(body.prompt_ids), self.roles.decoy), likely(tuple(body.prompt_ids), self.roles.zero)
            completions = (decoys[0], decoys[1 + self.index % (K - 1)], zeros[self.index % K])
            samples = tuple(TokenSample(c, (-30.0,) * len(c), "length") for c in completions)
            out.append(msgspec.structs.replace(body, samples=samples))
        return out


def drop(seed: int, ids: int) -> float:
    """The honest peers' relative drop of final eval with ``ids`` flooder ids against alone."""
    roles = grpo_swarm.tokens(seed)
    flooders = [grpo_swarm.policy(seed, 3 + i, LikelyDecoyFlooder, index=i, roles=roles) for i in range(ids)]
    return 1 - grpo_swarm.honest_eval(seed, flooders, "now") / grpo_swarm.honest_eval(seed, None, "now")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ids", type=int, default=3)
    p.add_argument("--num-external", type=int, default=4)
    p.add_argument("--seeds", type=int, default=8)
    args = p.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)
    grpo_swarm.GRPO = dataclasses.replace(grpo_swarm.GRPO, num_external=args.num_external)
    print(machine(), f"| OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} | load average {os.getloadavg()[0]:.1f}")
    start = time.monotonic()
    drops = [drop(seed, args.ids) for seed in range(args.seeds)]
    print(f"{args.ids} ids, num_external {args.num_external}: drop {statistics.mean(drops):.1%} +- {statistics.stdev(drops):.1%}"
          f" (per seed set {', '.join(f'{d:.1%}' for d in drops)}), {time.monotonic() - start:.0f} s, load {os.getloadavg()[0]:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
