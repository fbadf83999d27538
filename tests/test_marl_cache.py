"""JAX's persistent compilation cache (issue 33): a second process running the same MARL recipe
loads every program the first one compiled (JAX's hit events, the files on disk), compiles
nothing, and trains to the same numbers; the user's own JAX setting and ``off`` are respected."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

jax = pytest.importorskip("jax")  # the child processes need it
jumanji = pytest.importorskip("jumanji")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # two processes compile or load a MARL team (under load: minutes each)

RUN = """
import json, sys, time
start = time.perf_counter()
from genrl_swarm.cli import main
from genrl_swarm.paradigms.marl import cache
# exchange_timeout: which programs a run compiles depends on what it received (a peer's replay of
# the other's trajectories), so a peer compiling slowly on a loaded machine must not miss it.
code = main(["run", "--overwrite", "--recipe", "marl/tiny", "game.max_rounds=1", "learner.total_rounds=100", "game.exchange_timeout=600",
             f"run.dir={sys.argv[1]}", "run.console=false", "run.plot=false", "run.tensorboard=false"])
print(json.dumps({"code": code, "dir": str(cache.cache_dir()), "seconds": time.perf_counter() - start, **cache.counts()}))
"""


def play(run_dir: Path, **env: str) -> dict[str, Any]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    out = subprocess.run([sys.executable, "-c", RUN, str(run_dir)], capture_output=True, text=True, timeout=900, env=clean | env)
    assert out.returncode == 0, out.stderr[-3000:]
    report: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["code"] == 0
    return report


def trained(run_dir: Path) -> dict[str, float]:
    row = json.loads((run_dir / "peer-0" / "metrics.jsonl").read_text().splitlines()[0])
    return {k: v for k, v in row.items() if k.startswith("train/")}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One process that compiled the recipe into an empty cache: its run directory and report
    (read by both tests, so the suite pays for this cold compile once)."""
    root = tmp_path_factory.mktemp("marl_cache")
    return root, play(root / "a", GENRL_SWARM_JAX_CACHE=str(root / "jax"))


def test_a_second_process_loads_every_program_from_the_cache(tmp_path: Path, compiled: tuple[Path, dict[str, Any]]) -> None:
    root, first = compiled
    cache_dir = root / "jax"
    files = sorted(p.name for p in cache_dir.iterdir())
    assert first["dir"] == str(cache_dir)
    assert first["hits"] == 0 and len(files) >= 5 and first["writes"] >= len(files)  # two peers may write one program twice
    second = play(tmp_path / "b", GENRL_SWARM_JAX_CACHE=str(cache_dir))
    assert second["writes"] == 0, "the second process compiled something the first did not store"
    assert second["hits"] == second["requests"] >= len(files)
    assert sorted(p.name for p in cache_dir.iterdir()) == files
    assert trained(tmp_path / "b") == trained(root / "a") != {}  # the same executables: the same numbers


def test_off_and_the_users_own_jax_setting_are_respected(tmp_path: Path, compiled: tuple[Path, dict[str, Any]]) -> None:
    off = play(tmp_path / "a", GENRL_SWARM_JAX_CACHE="off", GENRL_SWARM_CACHE=str(tmp_path / "home"))
    assert off["dir"] == "None" and off["hits"] == off["writes"] == 0 and not (tmp_path / "home").exists()
    # The user's own setting, naming the directory the run above compiled into (a copy of it in
    # another directory missed every program, 45 of 45): every program is loaded from there (a
    # second cold compile would only show it written there), and ours is never created.
    own = compiled[0] / "jax"
    theirs = play(tmp_path / "b", JAX_COMPILATION_CACHE_DIR=str(own), GENRL_SWARM_JAX_CACHE=str(tmp_path / "ours"))
    assert theirs["dir"] == str(own) and theirs["writes"] == 0 and theirs["hits"] == theirs["requests"] > 0, theirs
    assert not (tmp_path / "ours").exists()
