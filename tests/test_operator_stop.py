"""Stopping a peer the way an operator does: Ctrl-C, SIGTERM (systemd, Docker, Kubernetes), a
second Ctrl-C, kill -9 at the worst instant. Each test runs the real command in a subprocess and
sends real signals; deadlines are generous (a loaded 2-core machine), nothing asserts speed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from genrl_swarm.comm.hivemind.process import children, running
from genrl_swarm.games.bandit import SoftmaxPolicy
from genrl_swarm.run.checkpoint import STATE_FILE, latest_checkpoint
from genrl_swarm.run.metrics import MetricsLogger, read_metrics

pytestmark = pytest.mark.slow  # peer processes stopped by signals

TESTS = Path(__file__).parent
QUIET = ["run.tensorboard=false", "run.plot=false", "run.console=false", "game.mode=train"]
SLOW = ["policy._target_=test_operator_stop.SlowSavePolicy", "+policy.delay=0.05"]


class SlowSavePolicy(SoftmaxPolicy):
    """The bandit policy, acting a little slowly; while the file ``$HOLD_SAVE`` exists its save
    hangs, so a test can signal a process in the middle of writing a checkpoint."""

    def __init__(self, delay: float = 0.05, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delay = delay

    def act(self, inputs: Any, stage: int, greedy: bool = False) -> Any:
        time.sleep(self.delay)
        return super().act(inputs, stage, greedy)

    def save(self, directory: Path) -> None:
        super().save(directory)
        hold = Path(os.environ.get("HOLD_SAVE", "/nonexistent"))
        while hold.exists():
            time.sleep(0.05)


class Cli:
    """``genrl-swarm <args>`` as a subprocess, stdout and stderr in one file (in write order)."""

    def __init__(self, tmp: Path, name: str, args: list[str], env: dict[str, str] | None = None, code: str | None = None) -> None:
        self.out = tmp / f"{name}.out"
        runner = ["-c", code] if code else ["-m", "genrl_swarm.cli"]
        path = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
        full_env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **(env or {})}
        with self.out.open("w") as sink:
            # Its own process group, like a command started from a shell: a terminal's Ctrl-C
            # reaches the whole group (p2pd and the DHT process too), not only the Python process.
            self.proc = subprocess.Popen(
                [sys.executable, *runner, *args], stdout=sink, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
            )

    def text(self) -> str:
        return self.out.read_text()

    def wait(self, timeout: float = 180) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"still running after {timeout}s:\n{self.text()[-3000:]}") from None


def wait_until(check: Callable[[], bool], cli: Cli | None, what: str, timeout: float = 180) -> None:
    """Poll ``check`` until true; fail at ``timeout``, or as soon as ``cli`` (if given) exits."""
    end = time.monotonic() + timeout
    while not check():
        output = cli.text()[-3000:] if cli else ""
        assert cli is None or cli.proc.poll() is None, f"exited ({cli.proc.returncode}) before {what}:\n{output}"
        assert time.monotonic() < end, f"timed out waiting for {what}:\n{output}"
        time.sleep(0.05)


def descendants(pid: int) -> list[int]:
    found = children(pid)
    return found + [d for child in found for d in descendants(child)]


def rounds(peer_dir: Path) -> list[int]:
    path = peer_dir / "metrics.jsonl"
    return [row["round"] for row in read_metrics(path)] if path.is_file() else []


def only_peer_dir(run: Path) -> Path:
    (peer,) = [p for p in run.iterdir() if p.is_dir()]
    return peer


def assert_complete_stop_checkpoint(peer_dir: Path) -> int:
    """``latest`` names a complete checkpoint of the last round with a row; nothing half-written."""
    checkpoints = peer_dir / "checkpoints"
    saved = latest_checkpoint(checkpoints)
    assert saved is not None, sorted(p.name for p in checkpoints.iterdir())
    assert (saved[1] / STATE_FILE).is_file() and (checkpoints / "latest").read_text() == saved[1].name
    assert saved[0] == max(rounds(peer_dir)), (saved[0], rounds(peer_dir))  # no played round left out of it
    assert not [p.name for p in checkpoints.iterdir() if p.name.startswith(".")]
    return saved[0]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", ["run", "swarm"])
def test_a_signal_stops_the_peer_saves_then_reports_and_exits_128_plus_signal(command: str, sig: signal.Signals, tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["--recipe", "bandit", f"run.dir={run}", "game.max_rounds=100000", "run.checkpoint_every=0", *QUIET, *SLOW]
    if command == "swarm":
        pytest.importorskip("hivemind")
        args[:0] = ["swarm", "--identity", str(tmp_path / "peer.key")]
    else:
        args[:0], args[len(args) :] = ["run"], ["swarm.num_peers=2"]
    cli = Cli(tmp_path, "peer", args)
    wait_until(lambda: run.is_dir() and any(len(rounds(p)) >= 3 for p in run.iterdir() if p.is_dir()), cli, "3 rounds")
    helpers = descendants(cli.proc.pid)  # swarm: the DHT process and its p2pd
    os.killpg(cli.proc.pid, sig)  # as a terminal (Ctrl-C) or systemd (SIGTERM) sends it: to every process of the group
    assert cli.wait() == 128 + sig, cli.text()[-3000:]
    # They die with the peer (SIGKILL, or the parent-death signal): soon, not at once.
    wait_until(lambda: not any(running(pid) for pid in helpers), None, f"{helpers} to end", timeout=60)
    text = cli.text()
    stopped, summary, hint = (text.find(s) for s in ("stopped by request", "cumulative reward:", "continue with: genrl-swarm"))
    assert 0 <= stopped < summary < hint, text[-3000:]  # the summary comes after every peer stopped
    assert f"genrl-swarm {command} --resume" in text and "Traceback" not in text, text[-3000:]
    for peer_dir in (p for p in run.iterdir() if p.is_dir()):
        assert_complete_stop_checkpoint(peer_dir)


def test_resume_after_sigterm_continues_with_one_row_per_round(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["run", "--recipe", "bandit", f"run.dir={run}", "swarm.num_peers=1", "run.checkpoint_every=0", *QUIET, *SLOW]
    cli = Cli(tmp_path, "first", [*args, "game.max_rounds=100000"])
    wait_until(lambda: run.is_dir() and len(rounds(run / "peer-0")) >= 3, cli, "3 rounds")
    cli.proc.send_signal(signal.SIGTERM)
    assert cli.wait() == 143, cli.text()[-3000:]
    last = assert_complete_stop_checkpoint(run / "peer-0")
    again = Cli(tmp_path, "again", ["run", "--resume", *args[1:], f"game.max_rounds={last + 4}"])
    assert again.wait() == 0, again.text()[-3000:]
    assert rounds(run / "peer-0") == list(range(last + 4))


def test_second_ctrl_c_quits_at_once_and_the_next_start_clears_the_half_written_save(tmp_path: Path) -> None:
    """A checkpoint is being written when a second Ctrl-C comes: the process quits without
    waiting, ``latest`` still names a complete checkpoint, and ``--resume`` removes the temporary
    directory the cut save left and continues from that checkpoint."""
    run, hold = tmp_path / "run", tmp_path / "hold"
    args = ["run", "--recipe", "bandit", f"run.dir={run}", "swarm.num_peers=1", "run.checkpoint_every=2", *QUIET, *SLOW]
    cli = Cli(tmp_path, "first", [*args, "game.max_rounds=100000"], env={"HOLD_SAVE": str(hold)})
    checkpoints = run / "peer-0" / "checkpoints"
    wait_until(lambda: latest_checkpoint(checkpoints) is not None, cli, "a first checkpoint")
    hold.touch()  # every save from now on hangs halfway
    wait_until(lambda: any(p.name.startswith(".round_") for p in checkpoints.iterdir()), cli, "a save under way")
    cli.proc.send_signal(signal.SIGINT)  # the peer stops once its save is done: it waits
    time.sleep(1)
    assert cli.proc.poll() is None, cli.text()[-3000:]
    cli.proc.send_signal(signal.SIGINT)
    assert cli.wait(timeout=60) == 130, cli.text()[-3000:]
    assert "quit without waiting" in cli.text()
    saved = latest_checkpoint(checkpoints)
    assert saved is not None and (saved[1] / STATE_FILE).is_file()  # the cut save never looks complete
    hold.unlink()
    again = Cli(tmp_path, "again", ["run", "--resume", *args[1:], f"game.max_rounds={saved[0] + 3}"])
    assert again.wait() == 0, again.text()[-3000:]
    assert not [p.name for p in checkpoints.iterdir() if p.name.startswith(".")]
    assert "temporary checkpoint file(s)" in again.text()
    assert rounds(run / "peer-0") == list(range(saved[0] + 3))


DIE_BEFORE_ROW = """
import os, signal, sys
from genrl_swarm import cli
from genrl_swarm.run.metrics import MetricsLogger

write_row = MetricsLogger.__call__

def killed_before_row_3(self, manager, result):
    if result.round == 3:  # the round's checkpoint is on disk, its row is not
        os.kill(os.getpid(), signal.SIGKILL)
    write_row(self, manager, result)

MetricsLogger.__call__ = killed_before_row_3
sys.exit(cli.main(sys.argv[1:]))
"""


def test_kill_between_the_checkpoint_and_the_row_loses_no_row(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["run", "--recipe", "bandit", f"run.dir={run}", "swarm.num_peers=1", "run.checkpoint_every=1", "game.max_rounds=6", *QUIET]
    killed = Cli(tmp_path, "killed", args, code=DIE_BEFORE_ROW)
    assert killed.wait() == -signal.SIGKILL, killed.text()[-3000:]
    assert latest_checkpoint(run / "peer-0" / "checkpoints")[0] == 3 and rounds(run / "peer-0") == [0, 1, 2]  # type: ignore[index]
    again = Cli(tmp_path, "again", ["run", "--resume", *args[1:]])
    assert again.wait() == 0, again.text()[-3000:]
    assert rounds(run / "peer-0") == [0, 1, 2, 3, 4, 5]
    assert "row of round 3 was lost" in again.text()


def test_a_row_cut_short_by_a_kill_is_replaced_not_glued_to(tmp_path: Path) -> None:
    """Killed mid-append, after the round's checkpoint: the file ends in half a row. The resumed
    logger drops it and writes the checkpoint's copy on a line of its own."""
    peer = tmp_path / "peer-0"
    peer.mkdir()
    (peer / "metrics.jsonl").write_text('{"round": 0, "peer": "peer-0", "rew')
    logger = MetricsLogger(peer, tensorboard=False, start_round=1, carried={"round": 0, "peer": "peer-0", "reward/own": 0.5})
    logger.close()
    assert read_metrics(peer / "metrics.jsonl") == [{"round": 0, "peer": "peer-0", "reward/own": 0.5}]
