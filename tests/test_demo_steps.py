"""The steps of the demo scripts (scripts/steps.sh) stop as ``genrl-swarm run`` does (issue
43.4): a signal to the script (make passes SIGTERM to it alone; a terminal's Ctrl-C reaches it
alone, as bash starts background steps with SIGINT ignored) gives every running step SIGTERM
once, waits for them, and exits 130 / 143 at once, with no step left running and no next step
started. Before, ``make demo-agent`` died at once and left its evaluations and warm-up running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
STEP = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def stop(*_):
    out.write_text("stopped")
    time.sleep(0.5)  # a step that saves before it exits
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
out.write_text("up")
time.sleep(60)
"""
SCRIPT = """
set -euo pipefail
DEMO_NAME=steps-test
. {root}/scripts/steps.sh
say "two steps at once"
step {python} -c '{step}' {tmp}/a
step {python} -c '{step}' {tmp}/b
await
say "next step"
"""


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_script_stops_every_running_step_once_and_exits_128_plus_it(sig: signal.Signals, tmp_path: Path) -> None:
    script = SCRIPT.format(root=ROOT, python=sys.executable, step=STEP, tmp=tmp_path)
    # Started as a terminal's shell starts it, SIGINT at its default: bash cannot trap a signal ignored
    # on entry, and in a full pytest run something before this test leaves SIGINT ignored here.
    proc = subprocess.Popen(
        ["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=_sigint_default
    )
    steps = [tmp_path / "a", tmp_path / "b"]
    end = time.monotonic() + 60
    while not all(s.is_file() and s.read_text() == "up" for s in steps):
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()[0]
        time.sleep(0.05)
    began = time.monotonic()
    os.kill(proc.pid, sig)  # the script alone, as make and a terminal's Ctrl-C reach it
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig and time.monotonic() - began < 10, (proc.returncode, out)
    assert [s.read_text() for s in steps] == ["stopped", "stopped"], out  # each step got SIGTERM and saved
    assert "steps-test: two steps at once" in out and "next step" not in out and f"stopping ({sig.name})" in out, out
