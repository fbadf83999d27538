"""The never-sign-twice guard: the last (round, stage) this identity signed, per epoch.

A peer killed mid-round and started again would otherwise sign a second, different commitment
for the same (epoch, round, stage): to everyone else, a proof of equivocation. The log lives in
the peer's run directory, is written before a commitment leaves the process (a kill after the
write is safe), and outlives ``--resume`` and ``--overwrite`` alike. Kept per epoch: a new run
(another epoch) owes nothing to what the identity signed in an old one, since no record of one
epoch pairs with one of another, while a peer that rejoins a run it played (a HiveMind swarm that
lived on) sits out every exchange up to the one it signed last.

The file is rewritten in place by one ``pwrite`` of at most a page, never renamed over: a rename
over a file makes ext4 write the new file's data out first (``auto_da_alloc``), which cost 4 ms a
signature on a busy disk, two thirds of a bandit round. A write within one page is all or nothing
for a killed process (the kernel checks for a fatal signal only between pages), and the file is
never truncated (shorter contents are padded with spaces, which JSON reads as whitespace), so no
moment holds a partial or empty log. Neither way was ever an fsync: a power loss is not covered.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgspec

from genrl_swarm.comm.epoch import Epoch
from genrl_swarm.core.decoders import json_decoder

log = logging.getLogger(__name__)

#: Epochs remembered: a peer rejoins one of the last few runs it played, never an old one.
KEEP_EPOCHS = 8
#: The most one in-place write covers (a page); a longer log is replaced through a temporary file.
IN_PLACE = 4096


class Signed(msgspec.Struct, frozen=True):
    """The last commitment this identity signed in one epoch (hex)."""

    epoch: str
    round: int
    stage: int


_decoder = json_decoder(list[Signed])


class SignedLog:
    """One file of ``Signed`` entries, newest last, at most ``KEEP_EPOCHS``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._size = 0  # the file's length: what a shorter write pads to
        self._entries = self._read()

    def _read(self) -> list[Signed]:
        if not self.path.exists():
            return []
        try:
            data = self.path.read_bytes()
            self._size = len(data)
            return _decoder.decode(data)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as e:
            # e.g. the format before epochs ("round stage swarm"): its commitments named no epoch,
            # so none of them can pair with one signed now.
            log.warning("%s is not a log of signed commitments per epoch (%s); starting it again", self.path, str(e)[:120])
            return []

    def last(self, epoch: Epoch) -> tuple[int, int] | None:
        """The last (round, stage) signed in ``epoch``, or None."""
        found = [(e.round, e.stage) for e in self._entries if e.epoch == epoch.hex]
        return found[-1] if found else None

    def record(self, epoch: Epoch, round: int, stage: int) -> None:
        """Written (atomically) before the commitment for (round, stage) leaves this process."""
        kept = [e for e in self._entries if e.epoch != epoch.hex]
        self._entries = [*kept, Signed(epoch.hex, round, stage)][-KEEP_EPOCHS:]
        data = msgspec.json.encode(self._entries)
        if max(len(data), self._size) <= IN_PLACE:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                written = os.pwrite(fd, data.ljust(self._size), 0)
            finally:
                os.close(fd)
            if written == max(len(data), self._size):
                self._size = written
                return
        temp = self.path.with_suffix(".tmp")  # more than a page (or a short write): replaced whole
        temp.write_bytes(data)
        os.replace(temp, self.path)
        self._size = len(data)
