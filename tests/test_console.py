"""The console table: libp2p ids (52 characters) are shown short, and still tell peers apart."""

from __future__ import annotations

import io
import threading
from types import SimpleNamespace
from typing import Any

from genrl_swarm.core.types import RoundResult
from genrl_swarm.run.console import ConsoleTable, short_ids

A = "12D3KooWGhVvCsq5hLbdd3i2dpDCKFyu1AkfrmKgNCnhTqDaaaaa"
B = "12D3KooWGhVvCsq5hLbdd3i2dpDCKFyu1AkfrmKgNCnhTqDbbaaa"  # differs from A only near the end


def test_long_ids_are_cut_to_their_ends_and_stay_distinct() -> None:
    labels = short_ids([A, B])
    assert labels[A] != labels[B] and all(len(v) < 20 for v in labels.values())
    assert labels[A].startswith("12D3Ko…") and A.endswith(labels[A].split("…")[1])
    assert short_ids(["peer-0", "peer-1"]) == {"peer-0": "peer-0", "peer-1": "peer-1"}  # short ids as they are


def test_the_table_prints_short_ids_for_columns_and_the_winner() -> None:
    out = io.StringIO()
    table = ConsoleTable([A, B], max_rounds=2, stream=out)
    for peer in (A, B):
        table(None, RoundResult(round=0, peer_id=peer, rewards={A: 0.5, B: 0.25}, winners=(B,)))  # type: ignore[arg-type]
    text = out.getvalue()
    assert A not in text and B not in text
    labels = short_ids([A, B])
    assert labels[A] in text.splitlines()[0] and labels[B] in text.splitlines()[0]
    assert labels[B] in text.splitlines()[1]  # the winner, as its column reads


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_peer(peer: str, stages: int = 2, start_round: int = 0) -> Any:
    from genrl_swarm.core.game import GameConfig, Hooks

    return SimpleNamespace(peer_id=peer, config=GameConfig(num_stages=stages), hooks=Hooks(), start_round=start_round)


def result(peer: str, r: int) -> RoundResult:
    return RoundResult(round=r, peer_id=peer, rewards={peer: 0.5}, winners=(peer,))


def test_a_long_round_gets_a_progress_line_saying_what_each_peer_does() -> None:
    out, clock = io.StringIO(), Clock()
    table = ConsoleTable(["peer-0", "peer-1"], max_rounds=3, stream=out, after=10, every=30, clock=clock)
    a, b = fake_peer("peer-0"), fake_peer("peer-1")
    table.attach(a)
    table.attach(b)
    table.start(ticking=False)
    clock.now = 5.0
    table.progress(clock.now)
    assert out.getvalue() == ""  # a short round says nothing
    a.hooks.after_stage[0](a, SimpleNamespace(round=0), 0, None)
    b.hooks.after_rewards[0](b, SimpleNamespace(round=0), None)
    clock.now = 12.0
    table.progress(clock.now)
    assert out.getvalue() == "  round 1/3, 12s in: peer-0 generating stage 2/2, peer-1 training\n"
    table.progress(20.0)
    assert out.getvalue().count("\n") == 1  # a file gets one line per `every` seconds, not one per tick
    clock.now = 45.0
    a.hooks.after_round[0](a, result("peer-0", 0))
    table.progress(clock.now)
    assert out.getvalue().splitlines()[-1] == "  round 1/3, 45s in: peer-1 training; 1 of 2 done"
    b.hooks.after_round[0](b, result("peer-1", 0))  # the row; the next round's clock starts here
    assert out.getvalue().splitlines()[-1].startswith("    1/3 ")
    table.progress(50.0)
    assert out.getvalue().splitlines()[-1].startswith("    1/3 ")
    for r in (1, 2):
        for m in (a, b):
            m.hooks.after_round[0](m, result(m.peer_id, r))
    table.progress(500.0)
    assert out.getvalue().splitlines()[-1].startswith("    3/3 ")  # all rounds done: a final evaluation is no round 4/3


def test_a_terminal_line_is_rewritten_in_place_and_cleared_before_the_row() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out, clock = Terminal(), Clock()
    table = ConsoleTable(["peer-0"], max_rounds=2, stream=out, after=10, clock=clock)
    peer = fake_peer("peer-0", stages=1, start_round=1)  # resumed: round 2 of 2
    table.attach(peer)
    table.start(ticking=False)
    for now in (11.0, 13.0):
        table.progress(now)
    assert out.getvalue() == "\r  round 2/2, 11s in: peer-0 generating stage 1/1\033[K\r  round 2/2, 13s in: peer-0 generating stage 1/1\033[K"
    peer.hooks.after_round[0](peer, result("peer-0", 1))
    assert out.getvalue().split("\033[K")[-2] == "\r" and "\n" in out.getvalue()  # cleared, then the header and row


def test_many_peers_are_counted_per_phase() -> None:
    peers = [f"peer-{i}" for i in range(6)]
    table = ConsoleTable(peers, max_rounds=1, stream=io.StringIO(), after=0)
    managers = [fake_peer(p) for p in peers]
    for m in managers:
        table.attach(m)
    table.start(ticking=False)
    for m in managers[:4]:
        m.hooks.after_rewards[0](m, SimpleNamespace(round=0), None)
    line = table.line(table.clock() + 1)
    assert line is not None and line.endswith(": 4 training, 2 generating stage 1/2")


def test_the_ticker_thread_writes_the_line_and_stops() -> None:
    written = threading.Event()

    class Stream(io.StringIO):
        def write(self, text: str) -> int:
            n = super().write(text)
            written.set()
            return n

    out = Stream()
    table = ConsoleTable(["peer-0"], max_rounds=1, stream=out, after=0, every=0.01)
    table.attach(fake_peer("peer-0"))
    table.start()
    try:
        assert written.wait(60), "no progress line from the ticker"
    finally:
        table.stop()
    assert table._ticker is not None and not table._ticker.is_alive()
    assert out.getvalue().startswith("  round 1/1, ")


def test_a_run_wires_the_table_to_every_peer(bandit_recipe: Any) -> None:
    from genrl_swarm.run.launcher import build_managers, run_managers

    out = io.StringIO()
    managers, _ = build_managers(bandit_recipe("game.max_rounds=2", "run.console=true"), stream=out)
    tables = {id(h): h for m in managers for h in m.hooks.after_round if isinstance(h, ConsoleTable)}
    assert len(tables) == 1
    table = next(iter(tables.values()))
    for hooks in ("after_stage", "after_rewards"):  # what each peer is doing inside a round
        assert all(any(getattr(h, "__self__", None) is table for h in getattr(m.hooks, hooks)) for m in managers)
    run_managers(managers, out)
    lines = out.getvalue().splitlines()
    assert [line.split()[0] for line in lines if line.strip()[:1].isdigit()] == ["1/2", "2/2"]


def test_third_party_info_is_kept_off_the_console_but_not_warnings_ours_or_a_users_level(caplog: Any) -> None:
    import logging

    from genrl_swarm.run.quiet import CHATTY, quiet_third_party

    saved = {name: logging.getLogger(name).level for name in CHATTY}
    logging.getLogger("httpx").setLevel(logging.DEBUG)  # the user's choice
    try:
        quiet_third_party()
        caplog.set_level(logging.INFO)  # as the CLI logs
        logging.getLogger("jax._src.xla_bridge").info("Unable to initialize backend 'tpu'")
        logging.getLogger("jax._src.compilation_cache").warning("a real problem")
        logging.getLogger("genrl_swarm.paradigms.marl.cache").info("JAX compilation cache: ~/.cache")
        logging.getLogger("httpx").info("HTTP Request: GET")
        assert [(r.name, r.getMessage()) for r in caplog.records] == [
            ("jax._src.compilation_cache", "a real problem"),
            ("genrl_swarm.paradigms.marl.cache", "JAX compilation cache: ~/.cache"),
            ("httpx", "HTTP Request: GET"),
        ]
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def test_the_cli_quiets_them_before_any_command_runs() -> None:
    import subprocess
    import sys

    code = "import logging; from genrl_swarm.cli import main; main(['games']); print('levels', logging.getLogger('jax._src').level, logging.getLogger('genrl_swarm').level)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.splitlines()[-1] == "levels 30 0"  # JAX's internals at WARNING, ours as configured (INFO from the root)


def test_jax_imports_after_the_cli_quieted_it_and_hivemind_renamed_warning() -> None:
    """hivemind renames logging.WARNING to "WARN"; JAX takes the ``jax`` logger's level name as its
    logging flag at import and refuses "WARN". Quieting the ``jax`` logger itself made a MARL peer
    on HiveMind crash at ``import jax``."""
    import subprocess
    import sys

    import pytest

    pytest.importorskip("hivemind")
    pytest.importorskip("jax")
    code = "from genrl_swarm.run.quiet import quiet_third_party; quiet_third_party(); import hivemind; import jax; print('imported')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().endswith("imported"), out.stderr[-500:]


def test_a_torchrun_rank_prints_the_swarms_table_one_column_per_peer() -> None:
    """Rank 0 of a torchrun job hosts one peer but prints every peer's reward as it scored them
    (the other ranks print none: the launcher gives them no table)."""
    out = io.StringIO()
    table = ConsoleTable([A], max_rounds=2, stream=out, swarm=True)
    table(None, RoundResult(round=0, peer_id=A, rewards={A: 0.5, B: 0.25}, winners=(A,)))  # type: ignore[arg-type]
    header, row = out.getvalue().splitlines()[:2]
    labels = short_ids([A, B])
    assert labels[A] in header and labels[B] in header
    assert "0.500" in row and "0.250" in row
