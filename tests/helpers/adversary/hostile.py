"""The adversary's transport: an in-memory peer that plays a ``Strategy``'s transport behaviours
(equivocate, hide, be late, bring fresh ids, archive and replay) on the shared ``Network``."""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

import msgspec

from genrl_swarm.comm.base import Phase, RawExchange
from genrl_swarm.comm.codec import Codec, Commitment, encode_signed
from genrl_swarm.comm.epoch import Epoch
from genrl_swarm.core import Body, ExchangeResult
from genrl_swarm.core.bodies import MAX_EVIDENCE
from genrl_swarm.core.identity import Identity
from genrl_swarm.core.types import Ref
from genrl_swarm.games.bandit.game import ArmPulls

from helpers.adversary.behaviours import Strategy
from helpers.adversary.network import Network, RiggedBackend
from helpers.stranger import Stranger


def signed_commitment(identity: Identity, sender: str, swarm: str, epoch: Epoch, round: int, stage: int, payload: bytes) -> bytes:
    """``sender``'s commitment to ``payload``, signed with its ``identity``."""
    record = Commitment(swarm, epoch.value, round, stage, sender, hashlib.sha256(payload).digest(), len(payload))
    return encode_signed("commit", record, identity.sign)


def old_run_records(honest: Mapping[str, Identity], swarm: str, rounds: int, stages: int) -> list[bytes]:
    """What the honest peers (id -> identity) signed in an earlier run of a same-named swarm
    (another epoch): kept by anyone who played it, replayed now."""
    old = Epoch.new()
    return [signed_commitment(i, p, swarm, old, r, s, os.urandom(64)) for p, i in honest.items() for r in range(rounds) for s in range(stages)]


class HostileBackend(RiggedBackend):
    """``strategy``'s transport behaviours; ``honest`` maps a behaviour's victim index to a peer id."""

    def __init__(self, network: Network, peer_id: str, strategy: Strategy, honest: Sequence[str], old_records: Sequence[bytes] = ()) -> None:
        super().__init__(network, peer_id)
        self.strategy, self.honest = strategy, list(honest)
        self.archive: dict[int, dict[tuple[str, Phase], bytes]] = {}  # round -> (sender, phase) -> bytes collected
        self.old_records = list(old_records)
        self.fresh: list[Stranger] = []
        self.done: Counter[str] = Counter()  # what it did, by behaviour (a search shows its attacks were played)

    def victims(self, indices: Collection[int]) -> list[str]:
        return [self.honest[i] for i in sorted(indices) if i < len(self.honest)]

    def exchange(
        self,
        round: int,
        stage: int,
        bodies: Sequence[Body],
        timeout: float,
        body_type: type[Body] = Body,
        ignore: Collection[str] = frozenset(),
        basis: Sequence[Ref] = (),
    ) -> ExchangeResult:
        s = self.strategy
        if s.equivocate is not None and stage == 0 and round in s.equivocate.rounds and bodies:
            self._second_face(round, bodies, self.victims(s.equivocate.victims))
        if s.hide is not None and stage in s.hide.stages:
            with self.network.lock:
                self.network.hidden |= {(v, self.peer_id, stage) for v in self.victims(s.hide.victims)}
        if s.replay is not None:
            self._replay_evidence(round)
        return super().exchange(round, stage, bodies, timeout, body_type, ignore, basis)

    def _second_face(self, round: int, bodies: Sequence[Body], victims: Sequence[str]) -> None:
        """Another validly signed stage-0 payload (each pull one arm over) for ``victims``."""
        other = [msgspec.structs.replace(b, arms=tuple((a + 1) % 8 for a in b.arms)) if isinstance(b, ArmPulls) else b for b in bodies]
        payload = Codec().encode(self.peer_id, round, 0, other)
        signed = signed_commitment(self.identity, self.peer_id, self.swarm_id, self.epoch, round, 0, payload)
        for victim in victims:
            self.network.show(victim, self.peer_id, round, 0, "commit", signed)
            self.network.show(victim, self.peer_id, round, 0, "reveal", payload)
        self.done["second faces"] += len(victims)

    def _replay_evidence(self, round: int) -> None:
        """Pass on archived honest commitments (``lag`` rounds old) and an old run's, as evidence."""
        assert self.strategy.replay is not None
        old = self.archive.get(round - self.strategy.replay.lag, {})
        replayed = [b for (sender, phase), b in old.items() if phase == "commit" and sender in self.honest]
        if self.strategy.replay.old_run:
            replayed += self.old_records[round % max(len(self.old_records), 1) :][:8]
        own = type(self.ledger).evidence.__get__(self.ledger)  # its own proofs first, then the replayed records
        self.ledger.evidence = lambda: [*own(), *replayed][:MAX_EVIDENCE]  # type: ignore[method-assign]
        self.done["replayed records"] += len(replayed)

    def _exchange_bytes(
        self, round: int, stage: int, phase: Phase, data: bytes, timeout: float, wait_for: Collection[str] | None = None
    ) -> RawExchange:
        s = self.strategy
        if s.late is not None and round in s.late.rounds:
            if s.late.silent and phase == "reveal":
                self.done["silent reveals"] += 1
                return RawExchange({}, 0)  # committed, never reveals
            if not s.late.silent and phase == "commit":
                if not self.network.wait_passed(self.honest, round, stage, phase, limit=30 * timeout):
                    raise RuntimeError(f"r{round}/s{stage}: an honest peer never collected its commitments")  # a harness bug, reported
                self.done["late posts"] += 1  # after every honest peer's commit deadline, however loaded the machine
        if s.replay is not None and s.replay.payload and phase == "reveal":
            data = self._replayed_payload(round, stage, data)
        if s.fresh is not None:
            self._fresh_ids(round, stage, phase)
        raw = super()._exchange_bytes(round, stage, phase, data, timeout, wait_for)
        book = self.archive.setdefault(round, {})
        for sender, blob in raw.payloads.items():
            book[(sender, phase)] = blob
        for old in [r for r in self.archive if r < round - 8]:
            del self.archive[old]
        return raw

    def _replayed_payload(self, round: int, stage: int, data: bytes) -> bytes:
        """An honest peer's payload of ``lag`` rounds ago in place of its own reveal (its own
        commitment names its own payload, so receivers find it does not match: its drop)."""
        assert self.strategy.replay is not None
        old = self.archive.get(round - self.strategy.replay.lag, {})
        honest = [b for (sender, phase), b in sorted(old.items()) if phase == "reveal" and sender in self.honest]
        if not honest or stage != 0:
            return data
        self.done["replayed payloads"] += 1
        return honest[0]

    def _fresh_ids(self, round: int, stage: int, phase: Phase) -> None:
        assert self.strategy.fresh is not None
        if phase == "commit":
            self.fresh = [Stranger(self.swarm, swarm_id=self.swarm_id) for _ in range(self.strategy.fresh.count)]
            for stranger in self.fresh:
                stranger.commit(round, stage, os.urandom(32))
            self.done["fresh ids"] += len(self.fresh)
        elif self.strategy.fresh.reveal:
            for stranger in self.fresh:
                stranger.reveal(round, stage, os.urandom(32))  # not what it committed to, nor a payload

    def serve_held(self, digest: bytes, asker: str) -> bytes | None:
        if self.strategy.hide is not None and asker in self.victims(self.strategy.hide.victims):
            self.done["fetches refused"] += 1
            return None
        return super().serve_held(digest, asker)
