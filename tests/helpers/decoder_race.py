"""The decoder race of issue 43, as processes that may crash: ``run`` starts them, each one plays
``rounds`` races in which ``threads`` threads, released together, make the first decode of
msgspec types nobody decoded before (the way in-process peers decode their first payloads at
once), on a tiny GIL switch interval so the threads interleave inside msgspec's type building.

Before ``core.decoders`` a process died with SIGSEGV (-11) in ``mpack_decode`` within a few such
races. Run as ``PYTHONPATH=tests python -X faulthandler -m helpers.decoder_race ROUNDS THREADS
[--codec-only]`` it is one process: exit 0, or a crash with every thread's stack on stderr. ``--codec-only`` races
only ``Codec.decode``, which older checkouts have too (``benchmarks/bench_decoder_race.py --src``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import msgspec

from genrl_swarm.comm.codec import Codec
from genrl_swarm.core.bodies import Body

Use = Callable[[], object]


def first_uses(n: int, codec_only: bool) -> list[Use]:
    """The first decodes of round ``n``'s fresh types, as peer threads make them: a payload of a
    fresh body type through ``Codec.decode`` (each thread its own codec, as each peer has), and a
    record sharing its nested struct through a JSON decoder and a warmed ``msgspec.convert``."""
    inner = msgspec.defstruct(f"Inner{n}", [("ids", tuple[int, ...]), ("note", Annotated[str, msgspec.Meta(max_length=64)])], frozen=True)
    body_type = msgspec.defstruct(f"RaceBody{n}", [("first", inner), ("rest", tuple[inner, ...])], bases=(Body,), tag=f"race{n}")
    body = body_type(task_id="t", input_digest="0" * 24, first=inner((1, 2), "a"), rest=(inner((3,), "b"),))
    payload = Codec().encode("peer-0", n, 0, [body])
    uses: list[Use] = [lambda: Codec().decode(payload, body_type)]
    if not codec_only:
        from genrl_swarm.core.decoders import json_decoder, warm

        record_type = msgspec.defstruct(f"Record{n}", [("inner", inner), ("more", list[inner])], frozen=True)
        record = record_type(inner((4,), "c"), [inner((), "d")])
        text, plain = msgspec.json.encode(record), msgspec.to_builtins(record)
        uses += [lambda: json_decoder(record_type).decode(text), lambda: (warm(record_type), msgspec.convert(plain, record_type))]
    return uses


def race(uses: list[Use], threads: int) -> list[BaseException]:
    """Release ``threads`` threads at once, each making every use (in an order of its own, so
    that any of them may be first); the errors they raised."""
    barrier, errors = threading.Barrier(threads), list[BaseException]()

    def play(i: int) -> None:
        barrier.wait()
        for use in uses[i % len(uses) :] + uses[: i % len(uses)]:
            try:
                use()
            except Exception as e:  # noqa: BLE001 - a half-built decoder may raise instead of crashing: counted
                errors.append(e)

    started = [threading.Thread(target=play, args=(i,)) for i in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join()
    return errors


def main(rounds: int, threads: int, codec_only: bool) -> int:
    sys.setswitchinterval(1e-6)  # the GIL changes hands inside msgspec's type building
    for n in range(rounds):
        if errors := race(first_uses(n, codec_only), threads):
            print(f"round {n}: {errors[0]!r}", file=sys.stderr)
            return 1
    return 0


@dataclass(frozen=True)
class Outcome:
    returncode: int  # 0: every race passed; -11: SIGSEGV
    stderr: str  # faulthandler's stacks on a crash


def run(processes: int, rounds: int, threads: int, src: Path | None = None, codec_only: bool = False, timeout: float = 120.0) -> list[Outcome]:
    """Start ``processes`` processes at once (``src``: import ``genrl_swarm`` from there) and
    wait for them all, each within ``timeout`` seconds of the start. A module, not a script:
    a script's folder would come first on its path, and ``helpers/operator.py`` shadow the stdlib."""
    path = [*([str(src)] if src else []), str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}
    argv = [sys.executable, "-X", "faulthandler", "-m", "helpers.decoder_race", str(rounds), str(threads), *(["--codec-only"] if codec_only else [])]
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(processes)]
    deadline = time.monotonic() + timeout
    return [Outcome(p.returncode, err) for p in procs for _, err in [p.communicate(timeout=max(1.0, deadline - time.monotonic()))]]


def crashes(outcomes: list[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.returncode != 0]


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--codec-only"]
    sys.exit(main(int(args[0]), int(args[1]), "--codec-only" in sys.argv))
