"""GameState: what a round has produced so far, on this peer and from the swarm."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from genrl_swarm.core.bodies import Body
from genrl_swarm.core.types import Drop, DropKind, Ref, Refusal, Rollout, StageInput, Task

#: (body, the input this peer built for its task) -> a reason to refuse it, or None.
Check = Callable[[Body, StageInput], "str | Refusal | None"]
#: body -> the text of each sample, derived by this peer (e.g. decoded with its own tokenizer).
Derive = Callable[[Body], "tuple[str, ...]"]
#: sender -> its stage-0 tasks this round, rebuilt by this peer (games with per-peer questions).
TasksOf = Callable[[str], "Sequence[Task]"]


@dataclass
class GameState:
    """The record of one round, queryable by stage, task and peer.

    ``tasks`` holds the round's questions by id (with the ground truth, private to this peer):
    its own, and in games with per-peer questions those of senders whose bodies it accepted
    (rebuilt here, never read from the sender); ``inputs`` the input of each task by stage;
    ``rollouts`` every body accepted, this peer's own and the swarm's; ``drops`` every body
    refused, with why; ``copies`` every body identical to one an earlier sender committed to:
    de-duplicated (trained on and credited once, as the first), never a drop against its
    sender, since converged honest peers sampling deterministically produce them too.
    ``sources`` names, per stage, the payload (sha256 hex) each recorded sender committed to:
    what a later stage's ``Ref`` points at. ``context`` holds, by the payload that carried them,
    bodies this peer holds but does not use itself: those it refused only for its own settings
    (``DropKind.LOCAL``) and those of payloads it fetched by digest (``core.views``). Another
    sender may have built its later-stage inputs on them, so they go into the rebuilt inputs of
    such a sender (``view``), and nowhere else: never scored, trained on, or in this peer's own
    inputs.
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

    def set_tasks(self, tasks: Iterable[Task]) -> None:
        self.tasks = {t.id: t for t in tasks}

    def record(
        self,
        stage: int,
        inputs: Sequence[StageInput],
        received: Mapping[str, Sequence[Body]],
        check: Check | None = None,
        derive: Derive | None = None,
        cpu_budget: float = math.inf,
        tasks_of: TasksOf | None = None,
        rebuilt: Mapping[str, Mapping[str, StageInput]] | None = None,
        tasks_differ: bool = False,
        charged: Mapping[str, float] | None = None,
    ) -> list[Drop]:
        """Store a stage: the inputs shown locally, and each peer's bodies (own included) that
        answer one of *those* inputs. A body for an unknown task, for an input other than the
        one this peer built (by digest), a second body for one task, a copy of a body an earlier
        sender committed to (``received`` is in commitment order: kept in ``copies``, not a drop),
        or one ``check`` refuses is dropped with its reason; the others are kept with their
        derived text. A sender whose
        bodies take more than ``cpu_budget`` seconds of this thread's CPU to check and derive
        loses the rest of them. With ``tasks_of`` (per-peer questions, stage 0) a sender's bodies
        answer *its* tasks, which this peer rebuilds (on the sender's CPU budget) and adds to
        ``tasks`` and ``inputs`` for the bodies it keeps. With ``rebuilt`` (later stages) a
        sender whose inputs were built from other earlier payloads than this peer's answers the
        inputs this peer rebuilt from them (kept on each ``Rollout.input``); a later-stage body
        for another input than the one this peer holds is a difference of view (``DropKind.VIEW``),
        since what went into a later input depends on what each peer received. With
        ``tasks_differ`` (``DataManager.tasks_differ``: honest peers' shared tasks can differ) a
        body for a task this peer does not play is ``DropKind.FOREIGN``, never counted; otherwise
        every honest peer holds the same tasks (or rebuilds the sender's), so it is ``REFUSED``.
        ``charged``: CPU seconds already spent on a sender's payload (its transport's reading of
        it, ``ExchangeResult.costs``), counted against the same budget."""
        mine = {i.task_id: i for i in inputs}
        self.inputs[stage] = dict(mine)
        known = self.sources.setdefault(stage, {})
        for peer in received:  # a sender recorded without a transport (tests, benchmarks): its payload unnamed
            known.setdefault(peer, "")
        dropped: list[Drop] = []
        producers: dict[tuple[str, bytes], str] = {}  # (task, content) -> first sender
        for peer, bodies in received.items():
            seen: set[str] = set()
            start = time.thread_time() - (charged or {}).get(peer, 0.0)
            rebuild = tasks_of is not None and peer != self.peer_id and len(bodies) > 0  # nothing to check: nothing to rebuild
            theirs = {t.id: t for t in tasks_of(peer)} if rebuild and tasks_of is not None else None
            allowed: Mapping[str, StageInput] = mine if theirs is None else {i: t.input(stage) for i, t in theirs.items()}
            allowed = (rebuilt or {}).get(peer, allowed)
            if len(bodies) > len(inputs):  # one body per task at most: the rest is never looked at
                why = f"{len(bodies)} bodies for {len(inputs)} tasks; the {len(bodies) - len(inputs)} extra were not read"
                dropped.append(Drop(peer, stage, None, why))
                bodies = bodies[: len(inputs)]
            for i, body in enumerate(bodies):
                if peer != self.peer_id and time.thread_time() - start > cpu_budget:
                    why = f"checking its bodies took over {cpu_budget:.2f}s of CPU; {len(bodies) - i} left unread"
                    dropped.append(Drop(peer, stage, None, why, DropKind.CPU))
                    break
                try:
                    reason, kind = self._refusal(stage, body, seen, check, allowed, theirs is None, tasks_differ)
                    seen.add(body.task_id)  # a refused body still uses up its task: no retries
                    key = body.content_key() if reason is None else None
                    if key is not None and producers.setdefault((body.task_id, key), peer) != peer:
                        reason, kind = f"identical to the body {producers[(body.task_id, key)]} committed to first", DropKind.COPY
                    texts = tuple(derive(body)) if derive is not None and reason is None else ()
                except Exception as e:  # noqa: BLE001 - game code (check, texts) on a stranger's body
                    if peer == self.peer_id:
                        raise
                    reason, kind = f"checking it failed: {type(e).__name__}: {e}", DropKind.SCORING
                if reason is not None:
                    if kind is DropKind.LOCAL and theirs is None:  # another peer's settings take it: context for its view
                        self._keep_as_context(Ref(stage, peer, known[peer]), body, derive, self._answered(body, mine, allowed))
                    (self.copies if kind is DropKind.COPY else dropped).append(Drop(peer, stage, body.task_id, reason, kind))
                    continue
                answered = self._answered(body, mine, allowed) if theirs is None else None
                if theirs is not None:
                    self.tasks.setdefault(body.task_id, theirs[body.task_id])
                    self.inputs[stage].setdefault(body.task_id, allowed[body.task_id])
                self.rollouts.append(Rollout(peer, self.round, stage, body, texts, answered))
        self.drops.extend(dropped)
        return dropped

    def add_context(self, ref: Ref, bodies: Sequence[Body], inputs: Mapping[str, StageInput], check: Check | None, derive: Derive | None) -> None:
        """The bodies of a payload fetched by its digest (``core.views``), checked as ``record``
        checks a sender's against ``inputs`` (this peer's own at stage 0; later, those rebuilt
        from the payload's own basis): the ones this peer would take, or refuses only for its own
        settings, are kept as context. Nothing here counts against anyone: the payload's producer
        did not send it to this peer, and what it costs was charged to the sender that named it."""
        self.context.setdefault(ref, [])  # held now, even with no body this peer can use
        seen: set[str] = set()
        for body in bodies[: len(inputs)]:
            try:
                reason, kind = self._refusal(ref.stage, body, seen, check, inputs, True, True)
            except Exception:  # noqa: BLE001 - game code on a stranger's body it did not send: not context, nothing else
                continue
            seen.add(body.task_id)
            if reason is None or kind is DropKind.LOCAL:
                self._keep_as_context(ref, body, derive, inputs[body.task_id] if ref.stage else None)

    @staticmethod
    def _answered(body: Body, mine: Mapping[str, StageInput], allowed: Mapping[str, StageInput]) -> StageInput | None:
        """The input a body answered when it is not this peer's own (one rebuilt for its sender)."""
        own = mine.get(body.task_id)
        return allowed[body.task_id] if own is None or own.digest != body.input_digest else None

    def _keep_as_context(self, ref: Ref, body: Body, derive: Derive | None, answered: StageInput | None) -> None:
        try:
            texts = tuple(derive(body)) if derive is not None else ()
        except Exception:  # noqa: BLE001 - this peer cannot read it (another tokenizer): no context, no blame
            return
        self.context.setdefault(ref, []).append(Rollout(ref.sender, self.round, ref.stage, body, texts, answered))

    def _refusal(
        self, stage: int, body: Body, seen: set[str], check: Check | None, allowed: Mapping[str, StageInput], mine: bool, differ: bool
    ) -> tuple[str | None, DropKind]:
        own = allowed.get(body.task_id)
        if own is None:  # evidence unless honest peers' tasks differ (a sender's own tasks are rebuilt: always evidence)
            why = f"task {body.task_id} is not one of {'this peer' if mine else 'the sender'}'s stage-{stage} tasks"
            return why, DropKind.FOREIGN if mine and differ else DropKind.REFUSED
        if body.task_id in seen:
            return f"a second body for task {body.task_id}", DropKind.REFUSED
        if body.input_digest != own.digest:  # stage 0 is the round's tasks, alike on every honest peer
            why = f"answers input {body.input_digest}, this peer built {own.digest} for task {body.task_id}"
            return why, DropKind.REFUSED if stage == 0 else DropKind.VIEW
        verdict = check(body, own) if check is not None else None
        return (verdict.reason, verdict.kind) if isinstance(verdict, Refusal) else (verdict, DropKind.REFUSED)

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
