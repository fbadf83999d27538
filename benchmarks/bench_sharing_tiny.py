"""Does bounding a swarm token's weight cost sharing its gain? The tiny model, equal compute.

A swarm token weighs min(1, n * the receiver's own probability of the path up to it)
(``lm/grpo_loss.py``, issue 42: the GRPO flood), and the swarm copies of one prefix-and-token
edge, from every sender, share that budget (``lm/swarm_budget.py``). That bounds a flooder's picks the receiver finds unlikely or
repeats, and also an honest peer's: the question here is whether the three honest peers of the flood benchmark's game
(tests/helpers/grpo_swarm.py: the first token scores 1 for a target digit, 0.5 for a decoy; exact
held-out eval; every peer the same 4 prompts a round) still learn more together than alone.

Arms, per seed set, three honest peers, no flooder:

- ``isolated``: each peer trains on its own 4 groups a round (``num_external`` 0);
- ``2 + 2``: 2 own and 2 swarm groups (the same number of completions trained on as isolated);
- ``all``: every own and every informative swarm group (the flood benchmark's setting, more compute);

the sharing arms under the bound (``now``), under the edge budget with the receiver's probability
of each token after its prefix (``edge``, the rule before the path budget), under the bound per
copy (``per-copy``, the rule before the edge budget) and with every swarm token weighing 1
(``equal-weight``); the arms' learners are bench_flood_grpo's.

    OMP_NUM_THREADS=1 python benchmarks/bench_sharing_tiny.py [--seeds 8] [--arms isolated "2 + 2, now" ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
import bench_flood_grpo  # noqa: E402, F401 - registers the edge and per-copy arms' learners
from common import machine  # noqa: E402

from helpers import grpo_swarm  # noqa: E402
from helpers.grpo_swarm import Rules  # noqa: E402

#: arm -> (num_local, num_external, rules)
ARMS: dict[str, tuple[int, int, Rules]] = {
    "isolated": (-1, 0, "now"),
    "2 + 2, now": (2, 2, "now"),
    "2 + 2, edge": (2, 2, "edge"),  # type: ignore[dict-item]
    "2 + 2, per-copy": (2, 2, "per-copy"),
    "2 + 2, equal-weight": (2, 2, "equal-weight"),
    "all, now": (-1, 12, "now"),
    "all, edge": (-1, 12, "edge"),  # type: ignore[dict-item]
    "all, per-copy": (-1, 12, "per-copy"),
    "all, equal-weight": (-1, 12, "equal-weight"),
}


def play(seed: int, arm: str) -> float:
    """The three honest peers' mean final eval in ``arm``."""
    local, external, rules = ARMS[arm]
    grpo_swarm.GRPO = dataclasses.replace(grpo_swarm.GRPO, num_local=local, num_external=external)
    return grpo_swarm.honest_eval(seed, None, rules)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS), help="isolated is always played")
    args = p.parse_args()
    start = time.monotonic()
    print(machine(), f"| OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} | load average {os.getloadavg()[0]:.1f}")
    evals = {arm: [play(seed, arm) for seed in range(args.seeds)] for arm in ARMS if arm in {"isolated", *args.arms}}
    for arm, values in evals.items():
        gain = [v - i for v, i in zip(values, evals["isolated"])]
        line = f"{arm:22s} honest final eval {statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"
        if arm != "isolated":
            line += (
                f", minus isolated {statistics.mean(gain):+.3f} ± {statistics.stdev(gain):.3f} (per seed set: {', '.join(f'{g:+.3f}' for g in gain)})"
            )
        print(line)
    rules = ("now", "edge", "per-copy", "equal-weight")
    for share in ("2 + 2", "all"):
        for i, a in enumerate(rules):
            for b in rules[i + 1 :]:
                bounded, other = f"{share}, {a}", f"{share}, {b}"
                if bounded not in evals or other not in evals:
                    continue
                diff = [x - y for x, y in zip(evals[bounded], evals[other])]
                print(
                    f"{bounded} minus {other}: {statistics.mean(diff):+.3f} ± {statistics.stdev(diff):.3f} (per seed set: {', '.join(f'{d:+.3f}' for d in diff)})"
                )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.seeds} seed sets, {time.monotonic() - start:.0f} s, peak RSS {rss:.0f} MB, load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
