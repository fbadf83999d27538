"""A disk that refuses a write ends the command with one line and exit 5, and loses nothing
(issue 43.3): full (ENOSPC), a file-size limit (EFBIG), read-only (EROFS), not writable (EACCES),
for ``genrl-swarm run``, ``swarm`` and the demo. Each error is the kernel's own
(``helpers/operator.py``). After an error mid-run every complete row and checkpoint is intact:
``--resume`` on a disk with room plays every round exactly once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from genrl_swarm.run.checkpoint import latest_checkpoint
from genrl_swarm.run.metrics import read_metrics

from helpers.operator import CLI, DEMO, QUIET, Ended, full_disk, python, read_only, unshare_works, without_write_permission

BANDIT = ["--recipe", "bandit", "swarm.num_peers=1", "run.checkpoint_every=1", "run.keep_checkpoints=0", *QUIET]
needs_namespaces = pytest.mark.skipif(not unshare_works(), reason="no mount namespaces here (unshare --user --mount refused)")


def assert_storage_error(ended: Ended, errno_name: str, where: Path) -> None:
    line = ended.line()
    assert ended.status == 5, (ended.status, ended.stderr[-3000:])
    assert line.startswith(f"genrl-swarm: storage error: cannot write {where}") and f"({errno_name})" in line, line


def assert_resume_plays_every_round_once(run: Path) -> None:
    """The run as the failure left it: its newest checkpoint is complete, and resuming it where
    there is room ends with one row per round."""
    saved = latest_checkpoint(run / "peer-0" / "checkpoints")
    assert saved is not None and saved[0] >= 1, saved
    rounds = saved[0] + 3
    again = python(CLI, ["run", "--resume", *BANDIT, f"run.dir={run}", f"game.max_rounds={rounds}"])
    assert again.status == 0, again.stderr[-3000:]
    assert [row["round"] for row in read_metrics(run / "peer-0" / "metrics.jsonl")] == list(range(rounds))


@needs_namespaces
def test_a_full_disk_mid_run_is_one_line_and_exit_5_and_resume_loses_nothing(tmp_path: Path) -> None:
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    ended = python(
        CLI, ["run", *BANDIT, f"run.dir={disk / 'run'}", "game.max_rounds=100000", "run.tensorboard=true"], wrap=full_disk(disk, "256k", kept)
    )
    assert_storage_error(ended, "ENOSPC", disk / "run" / "peer-0")
    assert_resume_plays_every_round_once(kept / "run")


def test_a_file_size_limit_mid_run_is_one_line_and_exit_5_and_resume_loses_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    ended = python(CLI, ["run", *BANDIT, f"run.dir={run}", "game.max_rounds=100000", "run.tensorboard=true"], limit_file_size=30_000)
    assert_storage_error(ended, "EFBIG", run / "peer-0")
    assert_resume_plays_every_round_once(run)


@needs_namespaces
@pytest.mark.parametrize("command", ["run", "swarm", "demo"])
def test_a_read_only_run_directory_is_one_line_and_exit_5(command: str, tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    args = {
        "run": (CLI, ["run", "--recipe", "bandit", *QUIET]),
        "swarm": (CLI, ["swarm", "--recipe", "bandit", *QUIET]),
        "demo": (DEMO, ["policy.model=tiny-random", *QUIET]),
    }
    module, given = args[command]
    if command == "swarm":
        pytest.importorskip("hivemind")
    ended = python(module, [*given, f"run.dir={disk / 'run'}"], wrap=read_only(disk))
    assert_storage_error(ended, "EROFS", disk / "run")


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="no setpriv to drop root's override of file permissions")
def test_a_run_directory_this_user_cannot_write_is_one_line_and_exit_5(tmp_path: Path) -> None:
    run = tmp_path / "run"
    ended = python(CLI, ["run", "--recipe", "bandit", *QUIET, f"run.dir={run}"], wrap=without_write_permission(run))
    assert_storage_error(ended, "EACCES", run / "peer-0")


@needs_namespaces
@pytest.mark.slow  # an LM demo on the tiny model
def test_a_full_disk_under_an_lm_checkpoint_is_one_line_and_exit_5(tmp_path: Path) -> None:
    """safetensors and torch report a full disk without its errno: it is found from the disk."""
    pytest.importorskip("transformers")
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    args = ["policy.model=tiny-random", *QUIET, f"run.dir={disk / 'run'}", "game.max_rounds=100", "run.checkpoint_every=1", "run.keep_checkpoints=0"]
    ended = python(DEMO, args, wrap=full_disk(disk, "3m", kept))
    line = ended.line()
    assert ended.status == 5 and "No space left on device (ENOSPC)" in line, (ended.status, ended.stderr[-3000:])
    assert line.startswith(f"genrl-swarm: storage error: cannot write {disk / 'run'}/peer-"), line
    for peer in (kept / "run").glob("peer-*"):  # no half checkpoint: each one there is complete
        assert not [p.name for p in (peer / "checkpoints").iterdir() if p.name.startswith(".")]
