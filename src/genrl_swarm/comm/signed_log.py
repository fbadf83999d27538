"""The never-sign-twice guard: the last (round, stage) this identity signed, per epoch.

A peer killed mid-round and started again would otherwise sign a second, different commitment
for the same (epoch, round, stage): to everyone else, a proof of equivocation. The log lives in
the peer's run directory, is written before a commitment leaves the process (a kill after the
write is safe), and outlives ``--resume`` and ``--overwrite`` alike. Kept per epoch: a new run
(another epoch) owes nothing to what the identity signed in an old one, since no record of one
epoch pairs with one of another, while a peer that rejoins a run it played (a HiveMind swarm that
lived on) sits out every exchange up to the one it signed last.
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
        self._entries = self._read()

    def _read(self) -> list[Signed]:
        if not self.path.exists():
            return []
        try:
            return _decoder.decode(self.path.read_bytes())
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
        temp = self.path.with_suffix(".tmp")
        temp.write_bytes(msgspec.json.encode(self._entries))
        os.replace(temp, self.path)
