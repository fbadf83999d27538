"""A swarm's epoch: what ties every signed record to one run of one swarm.

A swarm's name is a label anyone may reuse (every packaged recipe calls its swarm
``genrl-swarm``), and an operator may reuse an identity file in a new run. A commitment that
named only (swarm, round, stage) could then be paired with the same identity's commitment from
an earlier run, kept by anyone, and passed on as a proof of equivocation: every honest peer
quarantined the victim. Every signed record therefore names the run's epoch, a random nonce no
later run can share, and a record of another epoch is refused, never remembered, never a proof.

Who fixes it, per transport (each says why in its own ``agree_epoch``/``resumed_epoch``):

* in-memory: the board (``InMemorySwarm``) draws one when the process builds it. The whole swarm
  lives and dies in that process, resumed or not, so a fresh epoch at every start is what makes
  replaying the rounds after the last checkpoint safe: nothing signed before the restart can pair
  with anything signed after it, and nobody survives to hold either.
* torch.distributed: rank 0's, all-gathered before the first exchange (its run directory's on
  ``--resume``); the ranks of one job are one operator's processes.
* HiveMind: learned at join from the signed membership records of the peers this one joins
  through (its initial peers, else the ones it remembers); a peer that joins nobody starts the
  swarm with a fresh epoch, or its run directory's on ``--resume``.

Not the chain: the contract counts rounds, not runs, and a peer must know its epoch before its
first signature, with or without a coordinator. A peer's epoch is kept in its run directory
(``EPOCH_FILE``), so ``--resume`` (and only ``--resume``) plays the same run again; the
never-sign-twice log (``signed_log``) is kept per epoch.
"""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: 128 random bits: two runs drawing the same epoch is not a case to plan for.
EPOCH_BYTES = 16
#: Where a peer directory keeps the epoch its run plays.
EPOCH_FILE = "epoch"


@dataclass(frozen=True, order=True)
class Epoch:
    """One run's nonce (``EPOCH_BYTES`` bytes), signed into every record of that run."""

    value: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.value, bytes) or len(self.value) != EPOCH_BYTES:
            raise ValueError(f"an epoch is {EPOCH_BYTES} bytes")

    @classmethod
    def new(cls) -> Epoch:
        return cls(secrets.token_bytes(EPOCH_BYTES))

    @classmethod
    def from_hex(cls, text: str) -> Epoch:
        """ValueError for anything but ``EPOCH_BYTES`` bytes of hex."""
        return cls(bytes.fromhex(text.strip()))

    @property
    def hex(self) -> str:
        return self.value.hex()

    def __str__(self) -> str:
        return self.value.hex()[:12]


def saved_epoch(directory: Path) -> Epoch | None:
    """The epoch a peer directory's run plays, or None (none yet, or unreadable: logged)."""
    path = directory / EPOCH_FILE
    if not path.is_file():
        return None
    try:
        return Epoch.from_hex(path.read_text())
    except (OSError, ValueError) as e:
        log.warning("%s is not an epoch (%s): this run starts a new one", path, e)
        return None


def save_epoch(directory: Path, epoch: Epoch) -> None:
    """Kept before this peer signs anything in ``epoch`` (atomically: a kill never leaves half)."""
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / f"{EPOCH_FILE}.tmp"
    temp.write_text(epoch.hex)
    os.replace(temp, directory / EPOCH_FILE)
