"""The torch thread budget (issue 33): each in-process peer gets cores // peers threads (at least
one), unless the user said otherwise; the launcher applies it only where torch is in use."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from genrl_swarm.config import RecipeError
from genrl_swarm.run import threads
from genrl_swarm.run.launcher import run_recipe
from genrl_swarm.run.threads import ENV, ThreadBudget, available_cores, thread_budget


@pytest.mark.parametrize(
    ("cores", "peers", "expected"),
    [(2, 1, 2), (2, 2, 1), (2, 3, 1), (8, 2, 4), (8, 3, 2), (16, 4, 4), (1, 1, 1), (64, 64, 1)],
)
def test_each_peer_gets_its_share_of_the_cores(cores: int, peers: int, expected: int) -> None:
    budget = thread_budget(cores, peers, env={})
    assert budget == ThreadBudget(expected, cores, peers, "cores")
    assert budget.threads * peers <= max(cores, peers)  # never more than the cores, but one each at least


def test_what_the_user_said_wins_in_order() -> None:
    env = {ENV: "3", "OMP_NUM_THREADS": "5"}
    assert thread_budget(2, 2, requested=4, env=env, torch_threads=6).threads == 4  # run.threads
    assert thread_budget(2, 2, env=env, torch_threads=6) == ThreadBudget(3, 2, 2, ENV)
    assert thread_budget(2, 2, env={"OMP_NUM_THREADS": "5"}, torch_threads=6) == ThreadBudget(5, 2, 2, "OMP_NUM_THREADS")
    assert thread_budget(2, 2, env={}, torch_threads=6) == ThreadBudget(6, 2, 2, "torch.set_num_threads")
    assert thread_budget(2, 2, env={ENV: " ", "OMP_NUM_THREADS": ""}).source == "cores"  # empty = unset


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_bad_count_is_refused_by_name(value: str) -> None:
    with pytest.raises(ValueError, match=ENV):
        thread_budget(2, 2, env={ENV: value})
    with pytest.raises(ValueError, match="run.threads"):
        thread_budget(2, 2, requested=-1, env={})


def test_the_log_line_says_the_budget_and_how_to_change_it() -> None:
    line = thread_budget(2, 3, env={}).describe()
    assert "1 per peer" in line and "2 cores // 3 peers" in line and "3 threads on 2 cores" in line and ENV in line
    assert "from OMP_NUM_THREADS" in thread_budget(2, 1, env={"OMP_NUM_THREADS": "1"}).describe()


@pytest.fixture
def torch_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """torch at its default count, no thread variables; restored afterwards."""
    torch = pytest.importorskip("torch")
    saved = torch.get_num_threads()
    for name in (ENV, "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "_applied", None)
    torch.set_num_threads(available_cores())  # one of torch's own defaults: not the user's
    yield torch
    torch.set_num_threads(saved)


def test_a_launched_in_process_swarm_ends_on_the_budget(torch_threads: Any, bandit_recipe: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="genrl_swarm.run.threads"):
        run_recipe(bandit_recipe("game.max_rounds=1", "swarm.num_peers=3"))
    expected = max(1, available_cores() // 3)
    assert torch_threads.get_num_threads() == expected
    lines = [r.getMessage() for r in caplog.records if r.name == "genrl_swarm.run.threads"]
    assert len(lines) == 1 and f"torch threads: {expected} per peer" in lines[0]
    # A second launch in the same process takes the count it applied for its own, not the user's.
    run_recipe(bandit_recipe("game.max_rounds=1", "swarm.num_peers=1"), overwrite=True)
    assert torch_threads.get_num_threads() == available_cores()


def test_the_environment_variable_sets_the_budget(torch_threads: Any, bandit_recipe: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "3")
    run_recipe(bandit_recipe("game.max_rounds=1"))
    assert torch_threads.get_num_threads() == 3
    monkeypatch.setenv(ENV, "none")
    with pytest.raises(RecipeError, match=ENV):
        run_recipe(bandit_recipe("game.max_rounds=1"), overwrite=True)


def test_the_recipe_key_wins_over_the_environment(torch_threads: Any, bandit_recipe: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "3")
    run_recipe(bandit_recipe("game.max_rounds=1", "run.threads=5"))
    assert torch_threads.get_num_threads() == 5
    with pytest.raises(RecipeError, match="run.threads"):
        run_recipe(bandit_recipe("game.max_rounds=1", "run.threads=-1"), overwrite=True)


def test_the_users_own_torch_setting_is_kept(torch_threads: Any, bandit_recipe: Any) -> None:
    torch_threads.set_num_threads(available_cores() + 3)  # not a count torch picks by itself
    run_recipe(bandit_recipe("game.max_rounds=1"))
    assert torch_threads.get_num_threads() == available_cores() + 3


LM_SWARM = """
import json, sys
from genrl_swarm.cli import main
assert "torch" not in sys.modules
code = main(["run", "--recipe", "reasoning_gym", "policy.model=tiny-random", "swarm.num_peers=2", "game.max_rounds=1",
             "policy.sampling.max_new_tokens=3", "policy.sampling.num_generations=2", f"run.dir={sys.argv[1]}",
             "run.console=false", "run.plot=false", "run.tensorboard=false"])
import torch
print(json.dumps({"code": code, "threads": torch.get_num_threads()}))
"""


@pytest.mark.slow  # an LM swarm in a child process
def test_an_lm_swarm_that_imports_torch_itself_ends_on_the_budget(tmp_path: Path) -> None:
    pytest.importorskip("transformers")  # the child imports torch and the LM stack itself
    env = {k: v for k, v in os.environ.items() if k not in (ENV, "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", LM_SWARM, str(tmp_path)], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"code": 0, "threads": max(1, available_cores() // 2)}
    assert f"torch threads: {max(1, available_cores() // 2)} per peer" in out.stderr + out.stdout
