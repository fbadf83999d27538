"""The agent game: tool-calling episodes on a mix of envd tasks, trained with multi-turn GRPO.

Data. Each round draws ``tasks_per_round`` task instances (kinds in turn from ``tasks``, seeds
from (swarm seed, round, slot)), and each instance ``group_size`` times: copies are separate
tasks of the round (each one body per peer) sharing the ``group`` the learner normalises over.
Everything an episode needs (kind, seed, turn and token limits) is public, so it is in the
stage input and its digest: peers whose settings differ do not accept each other's episodes.

Curriculum. With ``curriculum`` (levels, easiest first, and a ``Promotion`` rule) every slot of a
round plays this peer's current level, and the peer moves up once its own episodes' success rate
at that level reaches the rule's threshold (``envd.tasks.curriculum``). Its level is public in
every task it plays, so receivers rebuild and score its episodes; peers at the same level play the
same instances (seeds depend on the round and slot only) and their groups join; a peer at another
level does not accept them (not one of its tasks: a difference of view, never held against it).
The level is saved with checkpoints (``state``) and restored on resume.

Reward. A peer's claim is never read (an episode carries none): ``AgentReward`` replays every
episode's model turns in this peer's own environment from the task's seed and takes that
environment's reward. An episode whose prompt or tool results do not replay raises, which drops
it for the round and counts against its sender (``RewardManager.score_state``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from genrl_swarm.core import DataManager, GameState, RewardManager, Rollout, RoundRewards, StageInput, Task
from genrl_swarm.envd.api import EnvClient
from genrl_swarm.envd.tasks import TASKS
from genrl_swarm.envd.tasks.curriculum import CurriculumConfig
from genrl_swarm.games.agent.shaping import Scored, Shaping, format_terms
from genrl_swarm.paradigms.agents.bodies import Episode
from genrl_swarm.paradigms.agents.chat import ChatRenderer
from genrl_swarm.paradigms.agents.episodes import prefills, replay, task_spec
from genrl_swarm.paradigms.agents.shared_env import shared_env
from genrl_swarm.paradigms.lm.models import SMOLLM2

if TYPE_CHECKING:
    from genrl_swarm.core.game import GameManager

log = logging.getLogger(__name__)


def agent_task(kind: str, seed: int, copy: int, max_turns: int, max_tokens: int, prefill: Sequence[str] = ()) -> Task:
    """Copy ``copy`` of the episode (kind, seed); ``group`` names the instance; ``prefill``: the
    scaffold ahead of each model turn (``agents.chat``), public like the rest."""
    public: dict[str, Any] = {"task": kind, "seed": seed, "copy": copy, "max_turns": max_turns, "max_tokens": max_tokens}
    if prefill:
        public["prefill"] = list(prefill)
    return Task.create(f"{kind} #{seed} (copy {copy})", None, public, group=f"{kind}:{seed}", **public)


class AgentData(DataManager):
    """A mix of envd tasks per round, each instance in ``group_size`` copies.

    ``mixes`` (with ``rank``, e.g. ``${peer.rank}``) gives peers different mixes: peer ``rank``
    plays ``mixes[rank % len(mixes)]``. Seeds depend on (seed, round, slot) only, so peers whose
    mixes put the same kind in the same slot play the same instances and their groups join."""

    def __init__(
        self,
        tasks: Sequence[str] = ("calculator", "sql"),
        tasks_per_round: int = 2,
        group_size: int = 4,
        max_turns: int = 4,
        max_tokens: int = 1024,
        eval_size: int = 2,
        seed: int = 0,
        prefill: Sequence[str] = (),
        mixes: Sequence[Sequence[str]] = (),
        rank: int = 0,
        curriculum: CurriculumConfig | Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(curriculum, Mapping):
            given: dict[str, Any] = {k: tuple(v) if k == "levels" else v for k, v in curriculum.items()}
            curriculum = CurriculumConfig(**given)
        self.curriculum = None if curriculum is None else curriculum.build()
        if self.curriculum is not None:  # the levels are the tasks; the current one plays every slot
            if mixes:
                raise ValueError("data.curriculum and data.mixes: choose one (a curriculum picks every slot's task)")
            tasks = self.curriculum.levels
        elif mixes:  # one task mix per peer (rank modulo the number of mixes); replaces ``tasks``
            if rank < 0 or not all(mixes):
                raise ValueError(f"mixes: every mix needs a task and rank must be >= 0, got {list(map(list, mixes))}, rank {rank}")
            tasks = tuple(mixes[rank % len(mixes)])
        if not tasks:
            raise ValueError("tasks: none given")
        if unknown := TASKS.unknown(tasks):
            raise ValueError(f"tasks: {unknown}")
        if min(tasks_per_round, group_size, max_turns, max_tokens) < 1 or eval_size < 0:
            raise ValueError("tasks_per_round, group_size, max_turns and max_tokens must be >= 1, eval_size >= 0")
        self.kinds, self.per_round, self.group_size = tuple(tasks), tasks_per_round, group_size
        self.tasks_differ = bool(mixes) or self.curriculum is not None  # peers play other kinds in a slot
        self.limits, self.seed, self.prefill = (max_turns, max_tokens), seed, tuple(prefill)
        self._eval = [agent_task(k, self._seed("eval", k, i), 0, *self.limits, self.prefill) for k in self.kinds for i in range(eval_size)]

    def _seed(self, *parts: object) -> int:
        return random.Random(repr((self.seed, *parts))).randrange(1 << 31)

    def round_tasks(self, round: int) -> list[Task]:
        kinds = (self.curriculum.level,) if self.curriculum is not None else self.kinds
        out = []
        for slot in range(self.per_round):
            kind = kinds[(round * self.per_round + slot) % len(kinds)]
            seed = self._seed("round", round, slot)
            out += [agent_task(kind, seed, c, *self.limits, self.prefill) for c in range(self.group_size)]
        return out

    def eval_tasks(self) -> list[Task]:
        return list(self._eval)

    def attach(self, manager: GameManager) -> None:
        """After each round's scoring, read what ``AgentReward`` scored (which also keeps its list
        from growing) and count this peer's own episodes of the round toward promotion."""
        if isinstance(manager.reward, AgentReward):
            manager.hooks.after_rewards.append(self._after_rewards)
        elif self.curriculum is not None:
            raise ValueError(f"data.curriculum needs the agent game's reward (AgentReward), got {type(manager.reward).__name__}")

    def _after_rewards(self, manager: GameManager, state: GameState, rewards: RoundRewards) -> None:
        assert isinstance(manager.reward, AgentReward)
        scored = manager.reward.take_scored()
        if self.curriculum is None:
            return
        for s in scored:  # own episodes of this round's tasks only: not evaluations, not the swarm's
            if s.peer == manager.peer_id and s.task_id in state.tasks and self.curriculum.record(s.kind, s.success >= 1.0):
                log.info("%s: promoted to %s in round %d", manager.peer_id, self.curriculum.level, state.round)

    def state(self) -> dict[str, Any]:
        return {} if self.curriculum is None else {"curriculum": self.curriculum.state()}

    def restore(self, state: Mapping[str, Any]) -> None:
        if self.curriculum is not None and "curriculum" in state:
            self.curriculum.restore(state["curriculum"])


class AgentReward(RewardManager):
    """The reward of an episode is what this peer's environment gives when its model turns are
    replayed there (see the module), plus the ``shaping`` weights times its format terms
    (``shaping.py``). ``model`` names the tokenizer (the policy's). Every episode scored is kept
    in ``scored`` (success and format terms apart) until ``take_scored`` reads them."""

    def __init__(
        self,
        model: str = SMOLLM2,
        env: str | EnvClient = "local",
        renderer: ChatRenderer | None = None,
        shaping: Shaping | Mapping[str, float] | None = None,
    ) -> None:
        self.renderer = renderer or ChatRenderer(load_tokenizer(model))
        self.env = shared_env(env) if isinstance(env, str) else env
        self.shaping = shaping if isinstance(shaping, Shaping) else Shaping(**(shaping or {}))
        self.scored: list[Scored] = []

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        body = rollout.body
        if not isinstance(body, Episode):
            raise TypeError(f"a {type(body).__name__} body; the agent game scores Episode bodies")
        spec = task_spec(task.metadata)
        scaffold = prefills(task.metadata)
        success = replay(body, spec, self.env, self.renderer, scaffold).reward
        model_turns = [t for t in body.turns if t.role == "assistant"]
        # what the environment parsed: each turn's scaffold, then the model's reply
        replies = [(scaffold[k] if k < len(scaffold) else "") + self.renderer.reply_text(t.token_ids) for k, t in enumerate(model_turns)]
        kind = TASKS.get(spec.task)
        call, answer = format_terms(replies, [t.name for t in kind.tools] if kind else [])
        scored = Scored(spec.task, success, call, answer, rollout.peer_id, task.id)
        self.scored.append(scored)
        return [scored.reward(self.shaping)]

    def take_scored(self) -> list[Scored]:
        """The episodes scored since the last call (for the success and format metrics)."""
        out, self.scored = self.scored, []
        return out


def load_tokenizer(model: str) -> Any:
    """The tokenizer of ``model`` alone (no weights), from where ``load_model`` would find it."""
    from transformers import AutoTokenizer

    from genrl_swarm.paradigms.lm.models import resolve_model_path

    return AutoTokenizer.from_pretrained(str(resolve_model_path(model)))
