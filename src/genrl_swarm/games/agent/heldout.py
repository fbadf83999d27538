"""Held-out episodes for the agent game: seeds no training round of a run uses, and their score.

``heldout_seeds`` draws seeds for a task kind from a stream of its own (not the data's
``round``/``eval`` streams) and skips any seed that a training round up to ``train_rounds``
serves, and, for tasks whose question is built without a scratch directory (the calculator
levels), any seed whose question is one a training round asks. ``evaluate`` plays one episode
per held-out task (greedy by default) and reports success (the environment's reward) and the
fraction of episodes with a parsable call of the task's tool, per task kind.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from genrl_swarm.core import Task
from genrl_swarm.envd.tasks import TASKS
from genrl_swarm.games.agent.game import AgentData, agent_task
from genrl_swarm.games.agent.shaping import format_terms
from genrl_swarm.paradigms.agents.episodes import prefills


def training_seeds(data: AgentData, rounds: int) -> dict[str, set[int]]:
    """Seeds per task kind that ``data`` serves in training rounds 0 .. rounds-1."""
    out: dict[str, set[int]] = {}
    for r in range(rounds):
        for task in data.round_tasks(r):
            out.setdefault(str(task.metadata["task"]), set()).add(int(task.metadata["seed"]))
    return out


def _question(kind: str, seed: int) -> str | None:
    """The task's prompt for ``seed`` when it needs no scratch directory, else None."""
    try:
        return TASKS[kind].setup(seed, None).prompt
    except Exception:  # noqa: BLE001 - tasks that need a scratch directory (sql) are compared by seed only
        return None


def heldout_seeds(kind: str, n: int, seed: int, exclude: Sequence[int] | set[int] = (), stream: str = "heldout") -> list[int]:
    """``n`` distinct seeds for ``kind``, none in ``exclude`` nor asking an excluded seed's
    question; ``stream`` names the draw (the warm-up draws its own, ``warmup.py``). The first
    ``n`` of a longer draw with the same arguments are the draw of ``n``."""
    if unknown := TASKS.unknown([kind]):
        raise ValueError(unknown)
    banned = set(exclude)
    questions = {q for s in banned if (q := _question(kind, s)) is not None}
    rng = random.Random(repr((seed, stream, kind)))
    out: list[int] = []
    seen: set[int] = set()
    while len(out) < n:
        s = rng.randrange(1 << 31)
        if s in banned or s in seen:
            continue
        seen.add(s)
        q = _question(kind, s)
        if q is not None and q in questions:
            continue
        if q is not None:
            questions.add(q)  # distinct questions among the held-out ones too
        out.append(s)
    return out


def heldout_tasks(data: AgentData, n: int, train_rounds: int) -> list[Task]:
    """``n`` held-out tasks per kind of ``data`` (its limits and scaffold), disjoint from its
    first ``train_rounds`` training rounds."""
    train = training_seeds(data, train_rounds)
    return [
        agent_task(kind, s, 0, *data.limits, data.prefill) for kind in data.kinds for s in heldout_seeds(kind, n, data.seed, train.get(kind, set()))
    ]


@dataclass(frozen=True)
class KindScore:
    """Held-out result of one task kind: ``n`` episodes, mean success, parsable-call fraction,
    well-formed-answer fraction, mean model turns."""

    kind: str
    n: int
    success: float
    call: float
    answer: float
    turns: float


def evaluate(policy: object, tasks: Sequence[Task], greedy: bool = True, batch: int = 32, replies: list[list[str]] | None = None) -> list[KindScore]:
    """Play one episode per task with ``policy`` (an ``AgentPolicy``), scored per kind; each
    episode's model turns as the environment parsed them (scaffold + reply) go to ``replies``."""
    from genrl_swarm.paradigms.agents.policy import AgentPolicy

    if not isinstance(policy, AgentPolicy):
        raise TypeError(f"evaluate takes an AgentPolicy, got {type(policy).__name__}")
    rows: dict[str, list[tuple[float, float, float, int]]] = {}
    for start in range(0, len(tasks), batch):
        chunk = tasks[start : start + batch]
        played = policy.play([t.input(0) for t in chunk], greedy=greedy)
        for task, p in zip(chunk, played):
            kind = str(task.metadata["task"])
            scaffold = prefills(task.metadata)
            model_turns = [t for t in p.episode.turns if t.role == "assistant"]
            texts = [(scaffold[k] if k < len(scaffold) else "") + policy.renderer.reply_text(t.token_ids) for k, t in enumerate(model_turns)]
            if replies is not None:
                replies.append(texts)
            call, answer = format_terms(texts, [t.name for t in TASKS[kind].tools])
            rows.setdefault(kind, []).append((p.reward, call, answer, len(model_turns)))
    return [
        KindScore(kind, len(v), *(sum(x[i] for x in v) / len(v) for i in range(4)))  # type: ignore[arg-type]
        for kind, v in rows.items()
    ]
