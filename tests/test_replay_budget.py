"""Replaying a sender's agent episode costs this peer's environment sandbox time: it is charged
to the sender, and a replay is cut off once the sender's ``cpu_budget`` is spent."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")  # the tiny model's tokenizer

from genrl_swarm.paradigms.agents.episodes import Session, task_spec

pytest.importorskip("torch")
from genrl_swarm.core import GameState, Task
from genrl_swarm.core.admission import admit
from genrl_swarm.games.agent import AgentReward, agent_task
from genrl_swarm.paradigms.agents.bodies import Episode
from genrl_swarm.paradigms.agents.policy import AgentPolicy
from genrl_swarm.paradigms.agents.shared_env import shared_env

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

#: A query the sql tool runs until its own instruction cap cuts it: sandbox CPU on every call.
HEAVY = '<tool_call>{"name": "execute_sql", "arguments": {"query": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"}}</tool_call>'


@pytest.fixture(scope="module")
def policy() -> AgentPolicy:
    return AgentPolicy("tiny-random", {"max_new_tokens": 256}, seed=1, env=shared_env("local"))


def heavy_episode(policy: AgentPolicy, t: Task) -> Episode:
    s = Session.start(policy.env, task_spec(t.metadata), policy.renderer)
    while not s.done:
        ids = [*policy.renderer.encode(HEAVY), policy.tokenizer.eos_token_id]
        s.turn(ids, [-0.5] * len(ids))
    s.stop()
    return s.episode(t.id, t.input(0).digest, 0, policy.fingerprint)


def test_replay_heavy_episodes_spend_the_senders_budget(policy: AgentPolicy) -> None:
    tasks = [agent_task("sql", 7, copy, 6, 4000) for copy in range(3)]
    bodies = [heavy_episode(policy, t) for t in tasks]
    state = GameState(0, "me", {t.id: t for t in tasks})
    refused = admit(state, 0, [t.input(0) for t in tasks], {"heavy": tuple(bodies)}, policy.check, derive=policy.texts)
    assert not refused, refused
    budget = 0.2
    rewards = AgentReward("tiny-random", env=policy.env).score_state(state, cpu_budget=budget)
    kinds = [d.kind for d in state.drops if d.peer_id == "heavy"]
    assert "scoring" in kinds and "cpu" in kinds, state.drops  # cut mid-replay, then the rest unread
    assert "budget" in next(d.reason for d in state.drops if d.kind == "scoring")
    assert not [r for r in rewards.scored if r.rollout.peer_id == "heavy"]
