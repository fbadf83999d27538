"""The scorer sandbox: a stranger's text never runs code in the peer, never stalls it past its
budget, and the work done for it is charged to it (issue: third-party scorers)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest

from genrl_swarm.core.meter import CutOff
from genrl_swarm.scoring import ScorerFailed, ScorerLimits
from genrl_swarm.scoring.pool import ScorerPool

from helpers.spiral import spiral, spiral_entry, spiral_pool

pytest.importorskip("reasoning_gym")
from genrl_swarm.scoring import rg_sandboxed  # noqa: E402, F401 - the scorer the sandbox preloads: it needs Reasoning Gym


@pytest.fixture(scope="module")
def pool() -> ScorerPool:
    p = spiral_pool()
    yield p
    p.close()


@pytest.fixture(scope="module")
def entry() -> dict:
    return spiral_entry()


def test_reasoning_gyms_eval_scorer_cannot_write_a_file_or_start_a_process(pool: ScorerPool, entry: dict, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    for attack in (
        f'__import__("os").system("touch {marker}")',
        f'open("{marker}", "w").write("x")',
        f'__import__("subprocess").run(["touch", "{marker}"])',
    ):
        got, _ = spiral(pool, entry, attack)
        assert isinstance(got, str) and "forbids" in got, got  # refused, and reported even though the scorer caught it
    assert not marker.exists()


def test_the_kernel_refuses_signals_processes_and_file_changes_even_to_code_that_hides_the_attempt(
    pool: ScorerPool, entry: dict, tmp_path: Path
) -> None:
    import os
    import subprocess

    victim = subprocess.Popen(["sleep", "60"])
    (tmp_path / "keep").write_text("x")
    try:
        attacks = [
            "__import__('os').killpg(__import__('os').getpgid(0), 9)",  # the peer's process group
            f"__import__('os').kill({os.getpid()}, 19)",  # stop the peer
            f"__import__('os').kill({victim.pid}, 9)",  # any process of the same user
            "__import__('os').kill(__import__('os').getpid(), 19)",  # stall itself, uncharged
            f"__import__('os').mkdir('{tmp_path / 'made'}')",
            f"__import__('os').remove('{tmp_path / 'keep'}')",
            f"__import__('os').symlink('/', '{tmp_path / 'link'}')",
            f"__import__('os').open('{tmp_path / 'written'}', 65)",  # O_WRONLY | O_CREAT, past the audit hook
            "__import__('_posixsubprocess').fork_exec(['/bin/true'], [b'/bin/true'], True, (), None, None, -1, -1, -1, -1, -1, -1, -1, -1, False, False, -1, None, None, None, -1, None, False)",
        ]
        for attack in attacks:
            got, _ = spiral(pool, entry, f"[{attack}]")
            assert got == 0.0 or isinstance(got, str), (attack, got)  # refused (the scorer catches the error)
        assert victim.poll() is None
        assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]
        assert spiral(pool, entry, entry["answer"], "honest")[0] == 1.0
    finally:
        victim.kill()


def test_a_worker_cannot_forge_the_reply_to_its_next_job(pool: ScorerPool, entry: dict) -> None:
    # every socket the worker holds gets five forged replies of 1.0 (the listing's own fd is left out)
    forge = ("[(lambda os, st, d: (os.close(d), [os.write(fd, (lambda p: len(p).to_bytes(4, 'big') + p)(__import__('msgspec').msgpack.encode({'value': 1.0})) * 5)"
             " for fd in sorted(set(map(int, os.listdir('/proc/self/fd'))) - {d}) if fd > 2 and st.S_ISSOCK(os.fstat(fd).st_mode)]))"
             "(__import__('os'), __import__('stat'), __import__('os').dup(0))]")  # fmt: skip
    got, _ = spiral(pool, entry, forge, "forger")
    assert isinstance(got, str) and "another job" in got  # the extra frames end that worker
    for _ in range(3):
        assert spiral(pool, entry, "1 2 3", "forger")[0] == 0.0  # a fresh worker: wrong answers score 0


def test_the_network_is_out_of_reach(pool: ScorerPool, entry: dict) -> None:
    got, _ = spiral(pool, entry, '__import__("socket").create_connection(("127.0.0.1", 22), 1)')
    assert isinstance(got, str) and "forbids" in got


def test_an_exponent_tower_is_cut_off_at_the_senders_budget_and_charged(pool: ScorerPool, entry: dict) -> None:
    start = time.monotonic()
    got, charged = spiral(pool, entry, "9**9**9**9", budget=0.5)
    assert isinstance(got, str) and "CPU" in got
    assert 0.4 <= charged <= 0.8  # cut at the remaining budget (0.5 s), not the per-call cap (1 s)
    assert time.monotonic() - start < 30  # CPU time, so a loaded machine stretches it but never unboundedly


def test_a_scorer_that_sleeps_is_charged_and_cut_like_one_that_spins(pool: ScorerPool, entry: dict) -> None:
    got, charged = spiral(pool, entry, '__import__("time").sleep(60)', budget=0.5)
    assert isinstance(got, str) and charged >= 0.45


def test_memory_is_capped(pool: ScorerPool, entry: dict) -> None:
    got, charged = spiral(pool, entry, '"x" * (1 << 34)')
    assert got == 0.0 or isinstance(got, str)  # a MemoryError in the worker (the scorer catches it): no 16 GiB anywhere
    assert charged < 1.0


def test_a_sender_cannot_change_how_another_senders_bodies_are_scored(pool: ScorerPool, entry: dict) -> None:
    honest = " ".join(entry["answer"].split())
    assert spiral(pool, entry, honest, "honest")[0] == 1.0
    # poison the worker: every later score in this process would be 0 for the right answer
    poison = '__import__("reasoning_gym").algorithmic.spiral_matrix.SpiralMatrixDataset.__dict__ and setattr(__import__("reasoning_gym").algorithmic.spiral_matrix.SpiralMatrixDataset, "score_answer", lambda *a, **k: 0.0)'
    spiral(pool, entry, poison, "evil")
    assert spiral(pool, entry, honest, "evil")[0] == 1.0  # a worker serves one call: not even its own next body
    assert spiral(pool, entry, honest, "honest")[0] == 1.0  # ... nor another sender's
    assert pool.forks >= 5


def test_a_call_in_a_fresh_worker_costs_milliseconds_not_a_start(pool: ScorerPool, entry: dict) -> None:
    """Every call gets a worker of its own, forked ahead of time from the warm zygote: a few
    milliseconds (about 4 ms at load 3.6 here), never the zygote's second-long start."""
    honest = entry["answer"]
    spiral(pool, entry, honest, "timed")
    times = []
    for _ in range(50):
        start = time.perf_counter()
        spiral(pool, entry, honest, "timed")
        times.append(time.perf_counter() - start)
        time.sleep(0.01)  # bodies are scored between other work: the next worker forks meanwhile
    assert statistics.median(times) < 0.1  # the median: a loaded machine's hiccups do not decide it


def test_a_cut_off_is_a_cutoff() -> None:
    assert issubclass(ScorerFailed, CutOff)  # score_state drops it even on the peer's own body


def test_a_dead_zygote_is_restarted_on_the_next_call(entry: dict) -> None:
    p = ScorerPool(ScorerLimits(workers=1), ("genrl_swarm.scoring.rg_sandboxed",))
    try:
        honest = entry["answer"]
        assert spiral(p, entry, honest, "a")[0] == 1.0
        assert p._zygote is not None
        p._zygote.kill()
        p._zygote.wait()
        assert spiral(p, entry, honest, "b")[0] == 1.0  # a new sender: a fork from a fresh zygote
    finally:
        p.close()
