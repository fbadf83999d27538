"""An adversary search (issue 42.5): random compositions of hostile behaviours (archive and
replay, equivocate, hide from chosen peers, be late, bring fresh ids, flood inside the bounds
with a random claim plan, vote in a coalition of 1 to 5 accounts) against three honest bandit
peers, real GameManagers on an in-memory board, with the invariants checked after every round
(tests/helpers/adversary/invariants.py). Reported: how many strategies it tried, every
violation, the worst honest eval loss found with one adversary of four, and how often each
behaviour was played and landed (drops of the adversary's ids by kind, runs in which an honest
peer quarantined it).

    OMP_NUM_THREADS=1 python benchmarks/bench_adversary.py [--strategies 200] [--seed 0] [--rounds 16]
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from helpers.adversary.harness import Outcome, play  # noqa: E402
from helpers.adversary.strategy import random_strategy  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--strategies", type=int, default=200)
    p.add_argument("--seed", type=int, default=0, help="of the strategy draw")
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--timeout", type=float, default=1.0, help="each exchange's deadline, seconds")
    args = p.parse_args()
    logging.basicConfig(level=logging.CRITICAL)  # the drops and quarantines are the point: not logged
    rng, start = random.Random(args.seed), time.monotonic()
    outcomes: list[Outcome] = []
    for i in range(args.strategies):
        outcome = play(random_strategy(rng, args.rounds), args.rounds, args.timeout)
        outcomes.append(outcome)
        flag = f"{len(outcome.violations)} VIOLATION(S)" if outcome.violations else "ok"
        print(f"{i + 1:4d} {outcome.seconds:5.1f}s eval loss {outcome.eval_loss:+6.1%} {flag}: {outcome.strategy.describe()}", flush=True)
        for v in outcome.violations:
            print(f"       {v}", flush=True)
    single = [o for o in outcomes if o.strategy.collude is None or o.strategy.collude.size == 1]
    worst = max(single, key=lambda o: o.eval_loss)
    landed: Counter[str] = Counter()
    did: Counter[str] = Counter()
    for o in outcomes:
        landed.update(o.hostile_drops)
        did.update(o.done)
    print(f"\nstrategies tried: {len(outcomes)} in {time.monotonic() - start:.0f} s; violations: {sum(len(o.violations) for o in outcomes)}")
    losses = [o.eval_loss for o in single]
    print(f"honest eval loss with one adversary of four ({len(single)} strategies): mean {statistics.mean(losses):+.1%}, "
          f"sd {statistics.stdev(losses):.1%}, worst {worst.eval_loss:+.1%} ({worst.strategy.describe()})")  # fmt: skip
    print(f"what the adversaries did: {dict(did.most_common())}")
    print(f"what landed: adversary ids dropped by kind {dict(landed.most_common())}; "
          f"quarantined by an honest peer in {sum(o.quarantined_rounds > 0 for o in outcomes)} runs")  # fmt: skip


if __name__ == "__main__":
    main()
