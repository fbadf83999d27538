"""The in-memory board as a transport that serves each puller apart (as a HiveMind peer does):
what a receiver collects from a sender is what that sender chose to show *it*.

Every peer of a harness run uses ``RiggedBackend`` with one shared ``Network``: a hostile peer
writes its second face or its hiding into the network, and each receiver's collect applies it.
Honest peers behave exactly as ``InMemoryBackend``.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from dataclasses import dataclass, field

from genrl_swarm.comm import InMemoryBackend, InMemorySwarm
from genrl_swarm.comm.base import Phase, RawExchange
from genrl_swarm.core.identity import Identity

Slot = tuple[str, str, int, int, Phase]  # receiver, sender, round, stage, phase


@dataclass
class Network:
    """Per-receiver deliveries of one run: ``faces`` replaces what a receiver collects from a
    sender for a slot; ``hidden`` (receiver, sender, stage) withholds that sender's reveals."""

    swarm: InMemorySwarm = field(default_factory=InMemorySwarm)
    faces: dict[Slot, bytes] = field(default_factory=dict)
    hidden: set[tuple[str, str, int]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    collected: set[tuple[str, int, int, Phase]] = field(default_factory=set)  # receiver, round, stage, phase: its deadline passed
    changed: threading.Condition = field(default_factory=threading.Condition)

    def show(self, receiver: str, sender: str, round: int, stage: int, phase: Phase, data: bytes) -> None:
        with self.lock:
            self.faces[(receiver, sender, round, stage, phase)] = data

    def passed(self, receiver: str, round: int, stage: int, phase: Phase) -> None:
        """``receiver``'s collect for the slot returned: anything posted to it from now on is late for it."""
        with self.changed:
            self.collected.add((receiver, round, stage, phase))
            self.changed.notify_all()

    def wait_passed(self, receivers: Collection[str], round: int, stage: int, phase: Phase, limit: float) -> bool:
        """Until every one of ``receivers`` has collected the slot (at most ``limit`` seconds): a
        late post that is late whatever the load, not one that races the receivers' start."""
        with self.changed:
            return self.changed.wait_for(lambda: all((r, round, stage, phase) in self.collected for r in receivers), limit)

    def deliver(self, receiver: str, round: int, stage: int, phase: Phase, got: dict[str, bytes]) -> dict[str, bytes]:
        with self.lock:
            shown = {s: self.faces.get((receiver, s, round, stage, phase), b) for s, b in got.items()}
            return {s: b for s, b in shown.items() if phase == "commit" or (receiver, s, stage) not in self.hidden}


class RiggedBackend(InMemoryBackend):
    """An in-memory peer whose collects go through ``network``."""

    def __init__(self, network: Network, peer_id: str, identity: Identity | None = None) -> None:
        super().__init__(network.swarm, peer_id, identity=identity)
        self.network = network

    def _exchange_bytes(
        self, round: int, stage: int, phase: Phase, data: bytes, timeout: float, wait_for: Collection[str] | None = None
    ) -> RawExchange:
        raw = super()._exchange_bytes(round, stage, phase, data, timeout, wait_for)
        self.network.passed(self.peer_id, round, stage, phase)
        return RawExchange(self.network.deliver(self.peer_id, round, stage, phase, dict(raw.payloads)), raw.expected, raw.missing)
