"""``make demo`` keeps ``genrl-swarm run``'s stop contract (issue 43.4), on the tiny model: it says
what it is doing within 10 s, SIGTERM stops it with 143 within 30 s, after a checkpoint of the
round it finished and no new round, and it reports no held-out accuracy it did not measure (it
used to run 6 min 50 s more, start another round, exit 0 and print "accuracy 0.354 -> 0.354")."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from genrl_swarm.run.checkpoint import latest_checkpoint
from genrl_swarm.run.metrics import read_metrics

from helpers.operator import DEMO, QUIET, environment

pytestmark = pytest.mark.slow  # an LM swarm stopped by a signal


def rows(peer: Path) -> list[int]:
    path = peer / "metrics.jsonl"
    return [row["round"] for row in read_metrics(path)] if path.is_file() else []


def wait_for(check: Callable[[], object], proc: subprocess.Popen[bytes], out: Path, what: str, timeout: float) -> float:
    """Seconds until ``check()`` held; fails if the demo ended first or ``timeout`` passed."""
    began = time.monotonic()
    while not check():
        assert proc.poll() is None, f"the demo ended ({proc.returncode}) before {what}:\n{out.read_text()[-3000:]}"
        assert time.monotonic() - began < timeout, f"no {what} after {timeout} s:\n{out.read_text()[-3000:]}"
        time.sleep(0.05)
    return time.monotonic() - began


def test_sigterm_stops_the_demo_with_143_a_checkpoint_no_new_round_and_no_unmeasured_accuracy(tmp_path: Path) -> None:
    pytest.importorskip("transformers")  # the tiny model
    run, out = tmp_path / "run", tmp_path / "demo.out"
    args = ["policy.model=tiny-random", "game.max_rounds=100000", "game.eval_every=100000", f"run.dir={run}", *QUIET]
    with out.open("w") as sink:
        proc = subprocess.Popen([sys.executable, *DEMO, *args], stdout=sink, stderr=subprocess.STDOUT, env=environment(), start_new_session=True)
    try:
        assert wait_for(lambda: out.read_text().strip(), proc, out, "first line", 60) < 10
        wait_for(lambda: all(len(rows(run / p)) >= 3 for p in ("peer-0", "peer-1")), proc, out, "3 rounds per peer", 240)
        played = {p: len(rows(run / p)) for p in ("peer-0", "peer-1")}
        proc.send_signal(signal.SIGTERM)
        began = time.monotonic()
        status = proc.wait(timeout=60)
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out.read_text()
    assert status == 143 and took < 30, (status, took, text[-3000:])
    assert "Traceback" not in text and "->" not in text and "accuracy after training: not measured" in text, text[-3000:]
    for peer, before in played.items():
        after = rows(run / peer)
        assert len(after) <= before + 1, (peer, before, after)  # at most the round under way was finished
        saved = latest_checkpoint(run / peer / "checkpoints")
        assert saved is not None and saved[0] == after[-1], (peer, saved, after)
