"""GameState: what a round has produced so far, on this peer and from the swarm."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from genrl_swarm.core.types import Drop, Ref, Rollout, StageInput, Task, Verified


@dataclass
class GameState:
    """The record of one round, queryable by stage, task and peer.

    ``tasks`` holds the round's questions by id (with the ground truth, private to this peer):
    its own, and in games with per-peer questions those of senders whose bodies it accepted
    (rebuilt here, never read from the sender); ``inputs`` the input of each task by stage;
    ``rollouts`` every body accepted, this peer's own and the swarm's (``core.admission`` decides
    which); ``drops`` every body refused, with why; ``copies`` every body identical to one an earlier sender committed to:
    de-duplicated (trained on and credited once, as the first), never a drop against its
    sender, since converged honest peers sampling deterministically produce them too.
    ``sources`` names, per stage, the payload (sha256 hex) each recorded sender committed to:
    what a later stage's ``Ref`` points at. ``context`` holds, by the payload that carried them,
    bodies this peer holds but does not use itself: those it refused only for its own settings
    (``DropKind.LOCAL``) and those of payloads it fetched by digest (``core.views``). Another
    sender may have built its later-stage inputs on them, so they go into the rebuilt inputs of
    such a sender (``view``), and nowhere else: never scored, trained on, or in this peer's own
    inputs. ``verified``: the bodies this peer's spot checks found drawn by their senders'
    committed models (``Verified``; a sender later proven forged takes its marks with it).
    """

    round: int
    peer_id: str
    tasks: dict[str, Task] = field(default_factory=dict)
    inputs: dict[int, dict[str, StageInput]] = field(default_factory=dict)
    rollouts: list[Rollout[Any]] = field(default_factory=list)
    drops: list[Drop] = field(default_factory=list)
    copies: list[Drop] = field(default_factory=list)
    sources: dict[int, dict[str, str]] = field(default_factory=dict)
    context: dict[Ref, list[Rollout[Any]]] = field(default_factory=dict)
    verified: list[Verified] = field(default_factory=list)

    def set_tasks(self, tasks: Iterable[Task]) -> None:
        self.tasks = {t.id: t for t in tasks}

    @property
    def stages(self) -> list[int]:
        return sorted(self.inputs)

    def input_for(self, rollout: Rollout[Any]) -> StageInput:
        """The input the rollout answered (what it is scored against): this peer's own for its
        task and stage, or the one it rebuilt from the earlier payloads the sender named."""
        return rollout.input if rollout.input is not None else self.inputs[rollout.stage][rollout.task_id]

    def refs(self, stage: int, senders: Iterable[str]) -> tuple[Ref, ...]:
        """The earlier payloads (stages before ``stage``) of ``senders`` this peer recorded."""
        wanted = set(senders)
        return tuple(sorted(Ref(s, p, d) for s, by in self.sources.items() if s < stage for p, d in by.items() if p in wanted))

    def view(self, refs: Iterable[Ref]) -> GameState:
        """This state as a peer that recorded exactly the payloads ``refs`` names would see it
        (earlier stages only): what later-stage inputs are built from, on the sender and on
        every receiver rebuilding them. Shares the tasks and inputs (read-only there). Its
        rollouts are in one order whatever order the payloads arrived in (by stage, then sender),
        so a game building an input from them builds it alike on every peer that holds them."""
        refs = sorted(set(refs))
        named = {(r.stage, r.sender, r.digest) for r in refs}
        keep = [x for x in self.rollouts if (x.stage, x.peer_id, self.sources.get(x.stage, {}).get(x.peer_id)) in named]
        keep += [x for r in refs for x in self.context.get(r, ())]
        keep.sort(key=lambda x: (x.stage, x.peer_id))  # stable: a payload's bodies keep their order
        return GameState(self.round, self.peer_id, self.tasks, self.inputs, keep, [], [], self.sources, self.context)

    def holds(self, refs: Iterable[Ref]) -> bool:
        """Whether this peer holds every payload ``refs`` names, exactly as named: recorded, or
        kept as context (``context``)."""
        return all(self.sources.get(r.stage, {}).get(r.sender) == r.digest or r in self.context for r in refs)

    def is_verified(self, rollout: Rollout[Any]) -> bool:
        """Whether a spot check of this peer's found ``rollout``'s body drawn by its sender's
        committed model (``verified``)."""
        return any(v.body is rollout.body and v.peer_id == rollout.peer_id for v in self.verified)

    def select(self, stage: int | None = None, task: str | None = None, peer: str | None = None) -> list[Rollout[Any]]:
        return [
            r
            for r in self.rollouts
            if (stage is None or r.stage == stage) and (task is None or r.task_id == task) and (peer is None or r.peer_id == peer)
        ]

    def local(self, stage: int | None = None) -> list[Rollout[Any]]:
        return self.select(stage=stage, peer=self.peer_id)

    def swarm(self, stage: int | None = None) -> list[Rollout[Any]]:
        """Rollouts of the other peers."""
        return [r for r in self.select(stage=stage) if r.peer_id != self.peer_id]

    def peers(self, stage: int | None = None) -> list[str]:
        return sorted({r.peer_id for r in self.select(stage=stage)})

    def drops_by_peer(self) -> dict[str, int]:
        return dict(sorted(Counter(d.peer_id for d in self.drops).items()))
