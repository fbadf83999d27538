"""The installed console command, as a user runs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXE = shutil.which("genrl-swarm", path=str(Path(sys.executable).parent))


@pytest.mark.skipif(EXE is None, reason="package not installed in this environment")
def test_help() -> None:
    out = subprocess.run([EXE, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "run" in out.stdout and "validate" in out.stdout


@pytest.mark.skipif(EXE is None, reason="package not installed in this environment")
def test_demo_game_prints_each_peer_per_round(tmp_path: Path) -> None:
    cmd = [EXE, "run", "--recipe", "bandit", "game.max_rounds=3", f"run.dir={tmp_path}", "run.tensorboard=false"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.strip().startswith(("1/", "2/", "3/"))]
    assert len(rows) == 3 and all(len(row) == 1 + 3 + 2 for row in rows)  # round, 3 peers, winner, time
    assert "cumulative reward: peer-0=" in out.stdout
    assert (tmp_path / "peer-2" / "metrics.jsonl").is_file()


def test_core_type_checks_strict() -> None:
    root = Path(__file__).parents[1] / "src" / "genrl_swarm"
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(root / "core"), str(root / "comm"), str(root / "config.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout
