"""Issue 43: peer threads making their first decodes at once must not crash the process.

msgspec caches a type's decoding info before it is complete; a thread that met it half-built
decoded through a NULL field type and the process died with SIGSEGV (``core.decoders``). The
race needs fresh types and a process that can die, so it runs in subprocesses
(``helpers/decoder_race.py``): 200 races of 8 threads. Before the fix the same run crashed 4 to 6
of its 8 processes; with it, none (nor with 1000 races: ``benchmarks/bench_decoder_race.py``).
About 4 s on an idle machine, 8 s at load 10."""

from __future__ import annotations

import threading

from genrl_swarm.core import decoders
from genrl_swarm.core.bodies import Envelope
from genrl_swarm.games.bandit.game import ArmPulls

from helpers import decoder_race

PROCESSES, ROUNDS, THREADS = 8, 25, 8  # 200 races, each of 8 threads released at once


def test_first_decodes_from_many_threads_do_not_crash() -> None:
    outcomes = decoder_race.run(PROCESSES, ROUNDS, THREADS, timeout=90)
    crashed = decoder_race.crashes(outcomes)
    assert not crashed, f"{len(crashed)} of {PROCESSES} processes failed (exit {crashed[0].returncode}):\n{crashed[0].stderr[-4000:]}"


def test_one_decoder_per_type_shared_by_every_thread() -> None:
    """Built once: every thread gets the same finished decoder."""
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(decoders.envelope_decoder(ArmPulls))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(d) for d in seen}) == 1
    assert decoders.msgpack_decoder(Envelope[ArmPulls]) is decoders.msgpack_decoder(Envelope[ArmPulls])
    assert decoders.json_decoder(ArmPulls) is not decoders.msgpack_decoder(ArmPulls)  # one per wire format
