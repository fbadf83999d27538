"""Run lifecycle: Ctrl-C stops every in-process peer within seconds and prints the summary."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from genrl_swarm.run.metrics import read_metrics

ROOT = Path(__file__).parents[1]


def test_sigint_stops_every_peer_and_prints_the_summary(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "genrl_swarm.cli", "run", "--recipe", "bandit", f"run.dir={tmp_path}",
           "game.max_rounds=1000000", "game.mode=train", "run.tensorboard=false", "run.plot=false", "run.checkpoint_every=0"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 60
        first = tmp_path / "peer-0" / "metrics.jsonl"
        while not (first.is_file() and len(read_metrics(first)) >= 5):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.05)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    assert took < 5, f"took {took:.1f}s to stop"
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "cumulative reward: peer-0=" in out, (out[-500:], err[-1500:])
    played = [len(read_metrics(tmp_path / f"peer-{i}" / "metrics.jsonl")) for i in range(3)]
    assert all(5 <= n < 1_000_000 for n in played) and max(played) - min(played) <= 1
    # The last checkpoint is written on the way out, so --resume continues from the stop.
    assert (tmp_path / "peer-0" / "checkpoints" / "latest").is_file()
