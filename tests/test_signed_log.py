"""The never-sign-twice log (comm/signed_log.py) is rewritten in place, never renamed over (a
rename made ext4 flush the data first: two thirds of a bandit round), and a killed writer
never leaves it partial or empty."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from genrl_swarm.comm import signed_log
from genrl_swarm.comm.epoch import Epoch
from genrl_swarm.comm.signed_log import KEEP_EPOCHS, SignedLog


def test_each_record_is_written_in_place_and_reads_back_after_a_shorter_one(tmp_path: Path) -> None:
    path = tmp_path / "last_signed"
    log, epochs = SignedLog(path), [Epoch.new() for _ in range(KEEP_EPOCHS + 2)]
    log.record(epochs[0], 0, 0)
    inode = path.stat().st_ino
    for i, epoch in enumerate(epochs):
        log.record(epoch, 1000 + i, i % 3)
    log.record(epochs[-1], 1, 0)  # fewer digits: the rest of the file is padding
    assert path.stat().st_ino == inode  # before: a new file renamed over it at every signature
    again = SignedLog(path)
    assert again.last(epochs[-1]) == (1, 0) and again.last(epochs[-2]) == (1000 + KEEP_EPOCHS, KEEP_EPOCHS % 3)
    assert again.last(epochs[0]) is None  # the oldest epochs are forgotten
    assert path.read_bytes().endswith(b" ")


def test_a_log_longer_than_one_write_covers_is_replaced_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signed_log, "IN_PLACE", 16)
    path, epoch = tmp_path / "last_signed", Epoch.new()
    SignedLog(path).record(epoch, 7, 1)
    inode = path.stat().st_ino
    log = SignedLog(path)
    log.record(epoch, 8, 2)
    assert path.stat().st_ino != inode and SignedLog(path).last(epoch) == (8, 2)


def test_a_writer_killed_at_any_moment_leaves_a_whole_log(tmp_path: Path) -> None:
    """A child records one signature after another until SIGKILL: the log it leaves always
    decodes and names a round it recorded (never a partial or empty file)."""
    path, epoch, rng = tmp_path / "last_signed", Epoch.new(), random.Random(0)
    other = Epoch.new()
    SignedLog(path).record(other, 10**9, 2)  # a longer entry of another run, so later writes pad
    for _ in range(20):
        pid = os.fork()
        if pid == 0:  # the child: sign forever
            log = SignedLog(path)
            for r in range(10**9):
                log.record(epoch, r, 0)
            os._exit(0)
        time.sleep(rng.uniform(0.001, 0.02))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        log = SignedLog(path)  # a file it cannot decode would read as empty
        assert log.last(other) == (10**9, 2), path.read_bytes()[:200]
