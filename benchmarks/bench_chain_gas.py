"""Gas of the SwarmCoordinator's two costly calls at 10 / 100 / 1,000 registered peers, on the
in-process EVM (eth-tester + py-evm), for docs/trust.md:

- a report scoring every peer (the first of the round: fresh storage), in parts of PART peers
  (``submitScoresPart``, as EvmCoordinator sends it) when it has more: its total and largest part;
- a settle page of PAGE peers when every voter scored each of them (the per-peer cost grows with
  the voters: a page holds fewer peers in a larger swarm; EvmCoordinator halves a page that fails);
- settling one peer whose scores came in a random order and one whose scores came in the order
  that made the old on-chain quickselect quadratic (tests/helpers/quickselect.py): the contract
  now verifies the median the caller submits with one count per score, so both cost the same.

A report's cost grows with the peers it scores (a first report ~68k gas a score, later ones
less): one transaction scoring 1,000 peers would need more than a 30M-gas block, hence parts.

    OMP_NUM_THREADS=1 python benchmarks/bench_chain_gas.py [--peers 10 100 1000] [--order-voters 1000]
"""

from __future__ import annotations

import argparse
import random
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", category=DeprecationWarning)
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from test_contract import SCALE, Chain  # noqa: E402

from helpers.quickselect import adversarial_order  # noqa: E402

PAGE = 8
PART = 256


def report_gas(chain: Chain, n: int) -> tuple[int, int, int]:
    """Account 0 scores all ``n`` peers for round 0: (total gas, largest part, parts)."""
    ordered = sorted((chain.acct(i) for i in range(n)), key=lambda a: int(a, 16))
    parts = [ordered[i : i + PART] for i in range(0, n, PART)]
    gas = []
    for k, part in enumerate(parts):
        if len(parts) == 1:
            receipt = chain.send(0, "submitScores", 0, part, [SCALE // 2] * len(part))
        else:
            receipt = chain.send(0, "submitScoresPart", 0, part, [SCALE // 2] * len(part), k == len(parts) - 1)
        gas.append(int(receipt["gasUsed"]))
    return sum(gas), max(gas), len(parts)


def measure(n: int) -> tuple[str, int]:
    """(gas of a full report, gas of one settle page) with ``n`` voters."""
    chain = Chain(accounts=n)
    chain.bulk([(who, "registerPeer", (f"peer-{who}",)) for who in range(n)])
    scored = sorted((chain.acct(i) for i in range(min(n, PAGE))), key=lambda a: int(a, 16))
    chain.bulk([(who, "submitScores", (0, scored, [SCALE // 2] * len(scored))) for who in range(1, n)], batch=20, gas=1_200_000)  # all but 0
    total, largest, parts = report_gas(chain, n)
    report = f"{total:,}" if parts == 1 else f"{total:,} in {parts} parts (largest {largest:,})"
    chain.send(0, "advanceRound")
    chain.send(0, "advanceRound")
    page = chain.settle(0, page=PAGE)["gasUsed"]  # the first page: peers every voter scored
    while not chain.read("roundStatus", 0)[0]:
        chain.settle(0, page=PAGE)
    assert chain.totals(1)[0] == SCALE // 2
    return report, int(page)


def order_gas(n: int) -> tuple[int, int]:
    """Gas of settling one peer scored by ``n`` voters in a random order, and one scored in the
    old quickselect's adversarial order (the same values)."""
    hostile = adversarial_order(n, n // 2 - 1)  # the old contract's index with n positive votes and one NEUTRAL
    shuffled = hostile.copy()
    random.Random(0).shuffle(shuffled)
    chain = Chain(accounts=n, block_gas=2_000_000_000)  # room to measure what a 30M block could not hold
    chain.bulk([(who, "registerPeer", (f"peer-{who}",)) for who in range(n)])
    a, b = chain.acct(0), chain.acct(1)
    value = {a: shuffled, b: hostile}
    low, high = sorted(value, key=lambda x: int(x, 16))
    chain.bulk([(who, "submitScores", (0, [low, high], [value[low][who] * 1000, value[high][who] * 1000])) for who in range(n)])
    chain.send(0, "advanceRound")
    chain.send(0, "advanceRound")
    gas = {}
    while not chain.read("roundStatus", 0)[0]:
        (peer,) = chain.read("scoredPeers", 0, chain.read("roundPage", 0)[0], 1)
        gas[peer] = int(chain.settle(0, page=1)["gasUsed"])
    return gas[a], gas[b]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--peers", type=int, nargs="*", default=[10, 100, 1000])
    p.add_argument("--order-voters", type=int, nargs="*", default=[1000])
    args = p.parse_args()
    if args.peers:
        print(f"| peers (voters) | gas of a report scoring every peer | gas of a settle page ({PAGE} peers) | gas per settled peer |")
        print("|---:|---:|---:|---:|")
    for n in args.peers:
        report, page = measure(n)
        print(f"| {n} | {report} | {page:,} | {page // PAGE:,} |", flush=True)
    if args.order_voters:
        print("\n| voters | settling one peer, scores in a random order | in the old quickselect's adversarial order | ratio |")
        print("|---:|---:|---:|---:|")
    for n in args.order_voters:
        shuffled, hostile = order_gas(n)
        print(f"| {n} | {shuffled:,} | {hostile:,} | {hostile / shuffled:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
