"""The core install works without torch: `pip install genrl-swarm` (no extra) imports the core,
the transports and the launcher, and plays the bandit game with its metrics (TensorBoard
included). torch is a paradigm's dependency (LM, agents, async), never the core's.

A child interpreter gets a meta-path finder that refuses every ``torch`` import, the same
ImportError an install without torch raises; the parent's torch is no help to it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from genrl_swarm.run.tensorboard import ScalarWriter

BLOCK_TORCH = """
import importlib.abc, sys

class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoTorch())
"""

PLAY_BANDIT = """
import json, sys
try:
    import torch
except ImportError:
    pass
else:
    raise SystemExit("the blocker let torch in")
import genrl_swarm.comm, genrl_swarm.config, genrl_swarm.core, genrl_swarm.run.launcher
from genrl_swarm.cli import main
code = main(["run", "--recipe", "bandit", "game.max_rounds=3", f"run.dir={sys.argv[1]}", "run.console=false", "run.plot=false"])
print(json.dumps({"code": code, "torch": sorted(m for m in sys.modules if m.split(".")[0] == "torch")}))
"""


def test_the_core_and_the_bandit_run_without_torch(tmp_path: Path) -> None:
    script = BLOCK_TORCH + PLAY_BANDIT
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"code": 0, "torch": []}
    for peer in ("peer-0", "peer-1", "peer-2"):
        rows = [json.loads(line) for line in (tmp_path / peer / "metrics.jsonl").read_text().splitlines()]
        assert [row["round"] for row in rows] == [0, 1, 2]
        assert list((tmp_path / peer / "tb").glob("events.out.tfevents.*"))


@pytest.mark.slow  # imports every test module (jax, ray, hivemind, ...)
def test_the_suite_collects_without_torch_every_torch_module_skips() -> None:
    """The test suite on a core install: modules that need torch skip (tests/test_hygiene.py
    checks the guards statically; this checks them for real), none fails to import."""
    script = (
        BLOCK_TORCH + f"import pytest, sys\nsys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', {str(Path(__file__).parent)!r}]))"
    )
    env = {**os.environ, "GENRL_SWARM_NO_SKIPS": "0"}  # the skips are the point here
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    skipped = {Path(line.split()[2].split(":")[0]).name for line in out.stdout.splitlines() if line.startswith("SKIPPED")}
    assert {"test_grpo_loss.py", "test_lm.py", "test_torch_dist.py"} <= skipped


def test_tensorboard_shows_a_resumed_runs_rounds_once(tmp_path: Path) -> None:
    """A resumed run plays rounds 2-3 again: TensorBoard must show the new values, not both."""
    first = ScalarWriter(tmp_path, purge_step=0)
    for step in range(4):
        first.add_scalar("reward/own", step, step)
    first.close()
    resumed = ScalarWriter(tmp_path, purge_step=2)
    for step in (2, 3):
        resumed.add_scalar("reward/own", 10 + step, step)
    resumed.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward/own")] == [(0, 0.0), (1, 1.0), (2, 12.0), (3, 13.0)]
