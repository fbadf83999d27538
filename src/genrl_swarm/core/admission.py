"""Admission: which of a stage's received bodies this peer keeps, and why it drops the others.

Every body a sender sends passes the same rules, in one place, before it is stored
(``GameState``), scored or trained on: it must answer one of *this* peer's inputs (or the one it
rebuilt for that sender), one body per task, not a copy of a body an earlier sender committed to,
and pass the game's own ``check``; reading it (``derive``) must not fail. What checking a sender's
bodies costs this thread's CPU counts against its budget, with what reading its payload cost
already (``charged``). A drop names its kind (``DropKind``): only kinds an honest peer cannot
cause count toward quarantine (``core.trust``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from genrl_swarm.core.bodies import Body
from genrl_swarm.core.state import GameState
from genrl_swarm.core.types import Drop, DropKind, Ref, Refusal, Rollout, StageInput, Task

#: (body, the input this peer built for its task) -> a reason to refuse it, or None.
Check = Callable[[Body, StageInput], "str | Refusal | None"]
#: body -> the text of each sample, derived by this peer (e.g. decoded with its own tokenizer).
Derive = Callable[[Body], "tuple[str, ...]"]
#: sender -> its stage-0 tasks this round, rebuilt by this peer (games with per-peer questions).
TasksOf = Callable[[str], "Sequence[Task]"]


@dataclass(frozen=True)
class Rules:
    """What this peer's game says of any body: ``check`` refuses it (a reason, or a ``Refusal``
    naming its kind), ``derive`` reads its text, and ``tasks_differ`` (``DataManager.tasks_differ``)
    says honest peers' shared tasks can differ, so a body for a task this peer does not play is
    ``DropKind.FOREIGN`` (never counted) rather than ``REFUSED``."""

    check: Check | None = None
    derive: Derive | None = None
    tasks_differ: bool = False


@dataclass
class Verdict:
    """One body's fate: kept (``reason`` None) with its ``texts``, or dropped with a kind."""

    reason: str | None
    kind: DropKind = DropKind.REFUSED
    texts: tuple[str, ...] = ()


@dataclass
class StageAdmission:
    """One stage's admission into ``state``.

    ``inputs``: the inputs this peer shows at ``stage``. ``tasks_of`` (per-peer questions, stage 0):
    a sender's bodies answer *its* tasks, which this peer rebuilds (on the sender's CPU budget)
    and adds to the state for the bodies it keeps. ``rebuilt`` (later stages): a sender whose
    inputs were built from other earlier payloads than this peer's answers the inputs this peer
    rebuilt from them (kept on each ``Rollout.input``); a later-stage body for another input than
    the one this peer holds is a difference of view (``DropKind.VIEW``). ``cpu_budget``: seconds of
    this thread's CPU a sender's bodies may take to check and read, ``charged`` counted first."""

    state: GameState
    stage: int
    inputs: Sequence[StageInput]
    rules: Rules = Rules()
    cpu_budget: float = math.inf
    tasks_of: TasksOf | None = None
    rebuilt: Mapping[str, Mapping[str, StageInput]] = field(default_factory=dict)
    charged: Mapping[str, float] = field(default_factory=dict)
    _producers: dict[tuple[str, bytes], str] = field(default_factory=dict)  # (task, content) -> first sender

    def admit(self, received: Mapping[str, Sequence[Body]]) -> list[Drop]:
        """Store the stage: the inputs, and each sender's bodies (own included) that pass; the
        drops (also appended to ``state.drops``; copies go to ``state.copies``). ``received`` is
        in commitment order: the first sender of a body keeps it, a later copy is de-duplicated."""
        state, mine = self.state, {i.task_id: i for i in self.inputs}
        state.inputs[self.stage] = dict(mine)
        known = state.sources.setdefault(self.stage, {})
        for peer in received:  # a sender recorded without a transport (tests, benchmarks): its payload unnamed
            known.setdefault(peer, "")
        dropped = [d for peer, bodies in received.items() for d in self._sender(peer, bodies, mine)]
        state.drops.extend(dropped)
        return dropped

    def _sender(self, peer: str, bodies: Sequence[Body], mine: Mapping[str, StageInput]) -> list[Drop]:
        """One sender's bodies, in order, until its CPU budget runs out."""
        own = peer == self.state.peer_id
        start = time.thread_time() - self.charged.get(peer, 0.0)
        theirs = self._their_tasks(peer, bodies)
        allowed: Mapping[str, StageInput] = mine if theirs is None else {i: t.input(self.stage) for i, t in theirs.items()}
        allowed = self.rebuilt.get(peer, allowed)
        dropped: list[Drop] = []
        if len(bodies) > len(self.inputs):  # one body per task at most: the rest is never looked at
            why = f"{len(bodies)} bodies for {len(self.inputs)} tasks; the {len(bodies) - len(self.inputs)} extra were not read"
            dropped.append(Drop(peer, self.stage, None, why))
            bodies = bodies[: len(self.inputs)]
        seen: set[str] = set()
        for i, body in enumerate(bodies):
            if not own and time.thread_time() - start > self.cpu_budget:
                why = f"checking its bodies took over {self.cpu_budget:.2f}s of CPU; {len(bodies) - i} left unread"
                dropped.append(Drop(peer, self.stage, None, why, DropKind.CPU))
                break
            verdict = self._judge(peer, body, seen, allowed, theirs is None)
            if verdict.reason is None:
                if theirs is not None:
                    self.state.tasks.setdefault(body.task_id, theirs[body.task_id])
                    self.state.inputs[self.stage].setdefault(body.task_id, allowed[body.task_id])
                answered = _answered(body, mine, allowed) if theirs is None else None
                self.state.rollouts.append(Rollout(peer, self.state.round, self.stage, body, verdict.texts, answered))
                continue
            if verdict.kind is DropKind.LOCAL and theirs is None:  # another peer's settings take it: context for its view
                ref = Ref(self.stage, peer, self.state.sources[self.stage][peer])
                keep_as_context(self.state, ref, body, self.rules.derive, _answered(body, mine, allowed))
            drop = Drop(peer, self.stage, body.task_id, verdict.reason, verdict.kind)
            (self.state.copies if verdict.kind is DropKind.COPY else dropped).append(drop)
        return dropped

    def _their_tasks(self, peer: str, bodies: Sequence[Body]) -> dict[str, Task] | None:
        """The sender's own tasks, rebuilt here, where its bodies answer those (per-peer questions)."""
        if self.tasks_of is None or peer == self.state.peer_id or not bodies:  # nothing to check: nothing to rebuild
            return None
        return {t.id: t for t in self.tasks_of(peer)}

    def _judge(self, peer: str, body: Body, seen: set[str], allowed: Mapping[str, StageInput], mine: bool) -> Verdict:
        """One body's verdict; game code failing on a stranger's body is that body's drop."""
        try:
            reason, kind = refusal(self.stage, body, seen, self.rules, allowed, mine)
            seen.add(body.task_id)  # a refused body still uses up its task: no retries
            key = body.content_key() if reason is None else None
            if key is not None and self._producers.setdefault((body.task_id, key), peer) != peer:
                return Verdict(f"identical to the body {self._producers[(body.task_id, key)]} committed to first", DropKind.COPY)
            if reason is not None:
                return Verdict(reason, kind)
            return Verdict(None, texts=tuple(self.rules.derive(body)) if self.rules.derive is not None else ())
        except Exception as e:  # noqa: BLE001 - game code (check, texts) on a stranger's body
            if peer == self.state.peer_id:
                raise
            return Verdict(f"checking it failed: {type(e).__name__}: {e}", DropKind.SCORING)


def refusal(stage: int, body: Body, seen: set[str], rules: Rules, allowed: Mapping[str, StageInput], mine: bool) -> tuple[str | None, DropKind]:
    """Why ``body`` is refused at ``stage`` (None: it is not) against the inputs ``allowed``
    (``mine``: this peer's own, not ones rebuilt for the sender), and the drop's kind."""
    own = allowed.get(body.task_id)
    if own is None:  # evidence unless honest peers' tasks differ (a sender's own tasks are rebuilt: always evidence)
        why = f"task {body.task_id} is not one of {'this peer' if mine else 'the sender'}'s stage-{stage} tasks"
        return why, DropKind.FOREIGN if mine and rules.tasks_differ else DropKind.REFUSED
    if body.task_id in seen:
        return f"a second body for task {body.task_id}", DropKind.REFUSED
    if body.input_digest != own.digest:  # stage 0 is the round's tasks, alike on every honest peer
        why = f"answers input {body.input_digest}, this peer built {own.digest} for task {body.task_id}"
        return why, DropKind.REFUSED if stage == 0 else DropKind.VIEW
    verdict = rules.check(body, own) if rules.check is not None else None
    return (verdict.reason, verdict.kind) if isinstance(verdict, Refusal) else (verdict, DropKind.REFUSED)


def admit_context(state: GameState, ref: Ref, bodies: Sequence[Body], inputs: Mapping[str, StageInput], rules: Rules) -> None:
    """The bodies of a payload fetched by its digest (``core.views``), checked as a sender's are
    against ``inputs`` (this peer's own at stage 0; later, those rebuilt from the payload's own
    basis): the ones this peer would take, or refuses only for its own settings, are kept as
    context. Nothing here counts against anyone: the payload's producer did not send it to this
    peer, and what it costs was charged to the sender that named it."""
    state.context.setdefault(ref, [])  # held now, even with no body this peer can use
    seen: set[str] = set()
    context_rules = Rules(rules.check, rules.derive, tasks_differ=True)
    for body in bodies[: len(inputs)]:
        try:
            reason, kind = refusal(ref.stage, body, seen, context_rules, inputs, True)
        except Exception:  # noqa: BLE001 - game code on a stranger's body it did not send: not context, nothing else
            continue
        seen.add(body.task_id)
        if reason is None or kind is DropKind.LOCAL:
            keep_as_context(state, ref, body, rules.derive, inputs[body.task_id] if ref.stage else None)


def keep_as_context(state: GameState, ref: Ref, body: Body, derive: Derive | None, answered: StageInput | None) -> None:
    """``body`` kept in ``state.context`` under the payload ``ref`` names, with its text."""
    try:
        texts = tuple(derive(body)) if derive is not None else ()
    except Exception:  # noqa: BLE001 - this peer cannot read it (another tokenizer): no context, no blame
        return
    state.context.setdefault(ref, []).append(Rollout(ref.sender, state.round, ref.stage, body, texts, answered))


def _answered(body: Body, mine: Mapping[str, StageInput], allowed: Mapping[str, StageInput]) -> StageInput | None:
    """The input a body answered when it is not this peer's own (one rebuilt for its sender)."""
    own = mine.get(body.task_id)
    return allowed[body.task_id] if own is None or own.digest != body.input_digest else None


def admit(
    state: GameState,
    stage: int,
    inputs: Sequence[StageInput],
    received: Mapping[str, Sequence[Body]],
    check: Check | None = None,
    *,
    derive: Derive | None = None,
    tasks_differ: bool = False,
    **options: Any,
) -> list[Drop]:
    """``StageAdmission(...).admit(received)`` in one call (tests, benchmarks, simple games);
    ``options`` are ``StageAdmission``'s (cpu_budget, tasks_of, rebuilt, charged)."""
    return StageAdmission(state, stage, inputs, Rules(check, derive, tasks_differ), **options).admit(received)
