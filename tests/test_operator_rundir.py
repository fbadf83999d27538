"""One peer directory, one process: a twin (a copied identity, the same command twice) is refused
while the first runs, and a finished run is continued or wiped only when asked."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from genrl_swarm import cli
from genrl_swarm.run.launcher import build_managers
from genrl_swarm.run.rundir import RunDirError
from test_operator_stop import QUIET, SLOW, Cli, rounds, wait_until


def test_a_twin_process_is_refused_and_the_first_keeps_its_history(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["--recipe", "bandit", f"run.dir={run}", "swarm.num_peers=1", "game.max_rounds=100000", *QUIET, *SLOW]
    first = Cli(tmp_path, "first", ["run", *args])
    wait_until(lambda: len(rounds(run / "peer-0")) >= 3, first, "3 rounds")
    for flag in ("--resume", "--overwrite"):  # even when told what to do with the run in there
        twin = Cli(tmp_path, f"twin{flag}", ["run", flag, *args])
        assert twin.wait() == 2, twin.text()[-3000:]
        (line,) = twin.text().splitlines()
        assert line.startswith("genrl-swarm: run directory error: ") and "in use by another running process" in line
    played = rounds(run / "peer-0")
    wait_until(lambda: len(rounds(run / "peer-0")) > len(played), first, "the first to play on")
    assert rounds(run / "peer-0")[: len(played)] == played == list(range(len(played)))  # nothing truncated
    first.proc.send_signal(signal.SIGINT)
    assert first.wait() == 130, first.text()[-3000:]


def test_a_directory_holding_a_run_needs_resume_or_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    args = ["--recipe", "bandit", f"run.dir={run}", "swarm.num_peers=1", "game.max_rounds=3", *QUIET]
    assert cli.main(["run", *args]) == 0
    capsys.readouterr()
    assert cli.main(["run", *args]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "already holds a run: pass --resume to continue it, or --overwrite" in line
    assert rounds(run / "peer-0") == [0, 1, 2]  # untouched
    assert cli.main(["run", "--overwrite", *args[:-1], "game.max_rounds=2"]) == 0
    assert rounds(run / "peer-0") == [0, 1]  # a new run, the old rows gone
    assert [p.name for p in (run / "peer-0" / "checkpoints").glob("round_*")] == ["round_000001"]


def test_the_lock_is_freed_when_the_game_ends(bandit_recipe: object, tmp_path: Path) -> None:
    """In one process (tests, notebooks): a finished run leaves the directory free to resume."""
    from genrl_swarm.run.launcher import run_recipe

    run_recipe(bandit_recipe("game.max_rounds=2", "swarm.num_peers=1"))  # type: ignore[operator]
    managers, _ = build_managers(bandit_recipe("game.max_rounds=4", "swarm.num_peers=1"), resume=True)  # type: ignore[operator]
    with pytest.raises(RunDirError, match="in use by another running process"):
        build_managers(bandit_recipe("game.max_rounds=4", "swarm.num_peers=1"), resume=True)  # type: ignore[operator]
    for m in managers:  # as the end of their game would: the after_game hooks free the directory
        m.comm.close()
        for hook in m.hooks.after_game:
            hook(m, [])
    build_managers(bandit_recipe("game.max_rounds=4", "swarm.num_peers=1"), resume=True)  # type: ignore[operator]
