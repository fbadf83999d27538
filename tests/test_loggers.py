"""``run.loggers``: one interface, JSONL always on, TensorBoard by default, trackio and W&B when
named; a bad name or a missing library is one recipe line before any peer is built, a tracker
that cannot start is one line too; trackio and W&B (offline) runs leave their files."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from genrl_swarm.config import LoggerName, RecipeError, load_recipe, resolve, validate
from genrl_swarm.run import loggers, metrics
from genrl_swarm.run.loggers.base import LoggerContext, scalars
from genrl_swarm.run.loggers.jsonl import JsonlLogger, read_metrics
from genrl_swarm.run.metrics import MetricsLogger
from genrl_swarm.run.preflight import preflight


def test_a_bad_logger_name_is_one_recipe_line() -> None:
    with pytest.raises(RecipeError) as raised:
        validate(resolve(load_recipe("bandit", ["run.loggers=[jsonl,tensorbored]"])))
    assert str(raised.value) == "run.loggers[1]: expected one of ['jsonl', 'tensorboard', 'trackio', 'wandb'], got 'tensorbored'"
    assert set(loggers.LOGGERS) == set(typing.get_args(LoggerName))  # every name the recipe allows opens a logger


def test_a_logger_whose_library_is_missing_is_one_line_before_any_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    real = loggers.importlib.util.find_spec
    monkeypatch.setattr(loggers.importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(RecipeError) as raised:
        preflight(resolve(load_recipe("bandit", ["run.loggers=[wandb]"])))
    assert str(raised.value) == "run.loggers: must name installed loggers: wandb needs the wandb package (pip install 'genrl-swarm[trackers]')"
    preflight(resolve(load_recipe("bandit", ["run.loggers=[jsonl,tensorboard,trackio]"])))  # the others are there


def test_jsonl_is_always_first_and_tensorboard_false_leaves_it_out() -> None:
    assert loggers.chosen(["tensorboard", "wandb", "wandb"]) == ["jsonl", "tensorboard", "wandb"]
    assert loggers.chosen(["jsonl", "tensorboard", "trackio"], tensorboard=False) == ["jsonl", "trackio"]
    assert loggers.chosen([]) == ["jsonl"]


def test_every_logger_gets_the_same_row_and_only_jsonl_sees_text(tmp_path: Path) -> None:
    row = {"round": 3, "peer": "peer-0", "winners": ["peer-0"], "reward/own": 0.5, "wins": 1}
    assert scalars(row) == {"reward/own": 0.5, "wins": 1.0}
    context = LoggerContext(tmp_path / "run" / "peer-0", peer="peer-0", run="run", game="bandit")
    jsonl = JsonlLogger(context)
    jsonl.log(row, 3)
    assert read_metrics(jsonl.path) == [row]


def test_a_tracker_that_cannot_start_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(name: str, context: LoggerContext) -> loggers.Logger:
        if name == "wandb":
            raise RuntimeError("api_key not configured (no-tty).\ncall `wandb login`")
        return loggers.open_logger(name, context)

    monkeypatch.setattr(metrics, "open_logger", refuse)
    with pytest.raises(RecipeError) as raised:
        MetricsLogger(tmp_path / "run" / "peer-0", ["jsonl", "wandb"])
    assert str(raised.value) == "run.loggers: wandb did not start: api_key not configured (no-tty). call `wandb login`"


def test_a_disk_error_while_opening_stays_a_disk_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run.failures gives ENOSPC, EROFS, ... their own line and status: not a recipe's."""

    def full(name: str, context: LoggerContext) -> loggers.Logger:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(metrics, "open_logger", full)
    with pytest.raises(OSError, match="No space left"):
        MetricsLogger(tmp_path / "run" / "peer-0", ["jsonl"])


@pytest.mark.slow  # W&B starts its own service process
def test_trackio_and_wandb_offline_runs_produce_their_files(tmp_path: Path) -> None:
    pytest.importorskip("trackio")
    pytest.importorskip("wandb")
    run, store = tmp_path / "run", tmp_path / "trackio"
    env = {
        **os.environ,
        "TRACKIO_DIR": str(store),
        "WANDB_MODE": "offline",
        **{f"WANDB_{k}_DIR": str(tmp_path / "wandb-home" / k.lower()) for k in ("CONFIG", "CACHE", "DATA")},
        "OMP_NUM_THREADS": "1",
    }
    args = [
        "run",
        "--recipe",
        "bandit",
        "game.max_rounds=3",
        "swarm.num_peers=2",
        f"run.dir={run}",
        "run.loggers=[jsonl,trackio,wandb]",
        "run.plot=false",
    ]
    done = subprocess.run([sys.executable, "-m", "genrl_swarm.cli", *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    for peer in ("peer-0", "peer-1"):
        rows = read_metrics(run / peer / "metrics.jsonl")
        assert [r["round"] for r in rows] == [0, 1, 2]
        (offline,) = (run / peer / "wandb").glob("offline-run-*/run-*.wandb")
        data = offline.read_bytes()  # W&B's record log: the keys, the run's name and the recipe are in it as text
        assert all(key in data for key in (b"reward/own_s1", b"mem/rss_mb", f"run/{peer}".encode(), b"max_rounds"))
    with sqlite3.connect(store / "bandit.db") as db:  # trackio's project is the recipe's name
        logged = db.execute("select run_name, step, metrics from metrics order by run_name, step").fetchall()
        (config,) = db.execute("select config from configs where run_name = 'run/peer-0'").fetchone()
    assert [(name, step) for name, step, _ in logged] == [(f"run/peer-{p}", s) for p in (0, 1) for s in (0, 1, 2)]
    first = json.loads(logged[0][2])
    assert first["reward/own"] == read_metrics(run / "peer-0" / "metrics.jsonl")[0]["reward/own"] and "reward/swarm_mean_s0" in first
    assert json.loads(config)["game"]["max_rounds"] == 3 and json.loads(config)["_Group"] == "run"
