"""GameState: what a round has produced so far, on this peer and from the swarm."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from genrl_swarm.core.bodies import Body
from genrl_swarm.core.types import Drop, Rollout, StageInput, Task

#: (body, the input this peer built for its task) -> a reason to refuse it, or None.
Check = Callable[[Body, StageInput], "str | None"]
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
    """

    round: int
    peer_id: str
    tasks: dict[str, Task] = field(default_factory=dict)
    inputs: dict[int, dict[str, StageInput]] = field(default_factory=dict)
    rollouts: list[Rollout[Any]] = field(default_factory=list)
    drops: list[Drop] = field(default_factory=list)
    copies: list[Drop] = field(default_factory=list)

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
        ``tasks`` and ``inputs`` for the bodies it keeps."""
        mine = {i.task_id: i for i in inputs}
        self.inputs[stage] = dict(mine)
        dropped: list[Drop] = []
        producers: dict[tuple[str, bytes], str] = {}  # (task, content) -> first sender
        for peer, bodies in received.items():
            seen: set[str] = set()
            start = time.thread_time()
            theirs = {t.id: t for t in tasks_of(peer)} if tasks_of is not None and peer != self.peer_id else None
            allowed = mine if theirs is None else {i: t.input(stage) for i, t in theirs.items()}
            if len(bodies) > len(inputs):  # one body per task at most: the rest is never looked at
                why = f"{len(bodies)} bodies for {len(inputs)} tasks; the {len(bodies) - len(inputs)} extra were not read"
                dropped.append(Drop(peer, stage, None, why))
                bodies = bodies[: len(inputs)]
            for i, body in enumerate(bodies):
                if peer != self.peer_id and time.thread_time() - start > cpu_budget:
                    why = f"checking its bodies took over {cpu_budget:.2f}s of CPU; {len(bodies) - i} left unread"
                    dropped.append(Drop(peer, stage, None, why, "cpu"))
                    break
                try:
                    reason, kind = self._refusal(stage, body, seen, check, allowed, "this peer's" if theirs is None else "the sender's"), "refused"
                    seen.add(body.task_id)  # a refused body still uses up its task: no retries
                    key = body.content_key() if reason is None else None
                    if key is not None and producers.setdefault((body.task_id, key), peer) != peer:
                        reason, kind = f"identical to the body {producers[(body.task_id, key)]} committed to first", "copy"
                    texts = tuple(derive(body)) if derive is not None and reason is None else ()
                except Exception as e:  # noqa: BLE001 - game code (check, texts) on a stranger's body
                    if peer == self.peer_id:
                        raise
                    reason, kind = f"checking it failed: {type(e).__name__}: {e}", "scoring"
                if reason is not None:
                    (self.copies if kind == "copy" else dropped).append(Drop(peer, stage, body.task_id, reason, kind))
                    continue
                if theirs is not None:
                    self.tasks.setdefault(body.task_id, theirs[body.task_id])
                    self.inputs[stage].setdefault(body.task_id, allowed[body.task_id])
                self.rollouts.append(Rollout(peer, self.round, stage, body, texts))
        self.drops.extend(dropped)
        return dropped

    def _refusal(self, stage: int, body: Body, seen: set[str], check: Check | None, allowed: Mapping[str, StageInput], whose: str) -> str | None:
        own = allowed.get(body.task_id)
        if own is None:
            return f"task {body.task_id} is not one of {whose} stage-{stage} tasks"
        if body.task_id in seen:
            return f"a second body for task {body.task_id}"
        if body.input_digest != own.digest:
            return f"answers input {body.input_digest}, this peer built {own.digest} for task {body.task_id}"
        return check(body, own) if check is not None else None

    @property
    def stages(self) -> list[int]:
        return sorted(self.inputs)

    def input_for(self, rollout: Rollout[Any]) -> StageInput:
        """The input this peer built for the rollout's task and stage (what it is scored against)."""
        return self.inputs[rollout.stage][rollout.task_id]

    def select(self, stage: int | None = None, task: str | None = None, peer: str | None = None) -> list[Rollout[Any]]:
        return [
            r
            for r in self.rollouts
            if (stage is None or r.stage == stage)
            and (task is None or r.task_id == task)
            and (peer is None or r.peer_id == peer)
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
