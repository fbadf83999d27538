"""The decoder race of issue 43 at length: how many processes die (SIGSEGV) when threads make
their first msgspec decodes at once (``tests/helpers/decoder_race.py``; the test runs 8 x 25).

``--src`` imports ``genrl_swarm`` from another checkout, e.g. the code before the fix
(``git archive <commit> src | tar -x -C /tmp/before``); such a checkout has only the codec's path,
so add ``--codec-only``.

    python benchmarks/bench_decoder_race.py --processes 40 --rounds 25
    python benchmarks/bench_decoder_race.py --src /tmp/before/src --codec-only
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from helpers import decoder_race  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=25, help="races per process, each with fresh types")
    ap.add_argument("--threads", type=int, default=8, help="threads released at once in each race")
    ap.add_argument("--batch", type=int, default=8, help="processes running at once")
    ap.add_argument("--src", type=Path, help="import genrl_swarm from this directory")
    ap.add_argument("--codec-only", action="store_true", help="race Codec.decode only (older checkouts)")
    args = ap.parse_args()
    start, outcomes = time.monotonic(), list[decoder_race.Outcome]()
    for done in range(0, args.processes, args.batch):
        outcomes += decoder_race.run(min(args.batch, args.processes - done), args.rounds, args.threads, args.src, args.codec_only, timeout=600)
    crashed = decoder_race.crashes(outcomes)
    codes = ", ".join(f"{code}: {n}" for code, n in sorted(Counter(o.returncode for o in crashed).items()))
    print(
        f"{len(crashed)} of {len(outcomes)} processes failed ({codes or 'none'}); {len(outcomes) * args.rounds} races of "
        f"{args.threads} threads; {time.monotonic() - start:.1f} s; src: {args.src or 'this checkout'}"
    )
    if crashed:
        text = crashed[0].stderr
        print(text[text.find("Current thread") :][:1500])


if __name__ == "__main__":
    main()
