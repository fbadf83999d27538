"""The curriculum inside the agent game: a peer is promoted by its own episodes' success (never by
the swarm's), every slot of its rounds then plays the new level, and the level survives a
checkpoint. Two real GameManagers over the in-memory transport, episodes replayed by each peer's
own environment; the policies are scripted (a tiny random model never solves a task)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

pytest.importorskip("torch")  # genrl_swarm.games.agent loads the LM stack

from genrl_swarm.comm import InMemoryBackend
from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core import Body, GameConfig, GameManager, RoundResult, StageInput
from genrl_swarm.core.trust import TrustConfig
from genrl_swarm.envd.tasks import TASKS
from genrl_swarm.games.agent import AgentData, AgentReward
from genrl_swarm.paradigms.agents.episodes import Session, prefills, task_spec
from genrl_swarm.paradigms.agents.policy import AgentPolicy
from genrl_swarm.paradigms.agents.shared_env import shared_env

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

LEVELS = ["calculator-1", "calculator-2", "calculator"]


class Scripted(AgentPolicy):
    """Calls the tool on the question's expression, then answers: the tool's result while
    ``solving`` says so for the round's level, a wrong number otherwise."""

    def __init__(self, solving: dict[str, bool], max_new_tokens: int = 128) -> None:
        super().__init__("tiny-random", {"max_new_tokens": max_new_tokens}, seed=1, env=shared_env("local"))
        self.solving = solving

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        return [self._episode(i) for i in inputs]

    def _episode(self, i: StageInput) -> Body:
        spec = task_spec(i.context)
        setup = TASKS[spec.task].setup(spec.seed, None)
        expression = setup.prompt.split("What is ")[1].split("?")[0]
        answer = setup.truth if self.solving.get(spec.task, False) else "-1"
        call = f'<tool_call>{{"name": "calculate", "arguments": {{"expression": "{expression}"}}}}</tool_call>'
        s = Session.start(self.env, spec, self.renderer, prefills(i.context))
        for text in (call, f"<answer>{answer}</answer>"):
            ids = [*self.renderer.encode(text), self.tokenizer.eos_token_id]
            s.turn(ids, [-0.5] * len(ids))
        s.stop()
        return s.episode(i.task_id, i.digest, 0, self.fingerprint)


def data() -> AgentData:
    return AgentData(tasks_per_round=1, group_size=4, max_turns=2, max_tokens=1000, eval_size=0, seed=3,
                     curriculum={"levels": LEVELS, "window": 4, "threshold": 0.75})  # fmt: skip


def play(rounds: int, solvers: Sequence[dict[str, bool]], limits: Sequence[int] = (128, 128)) -> tuple[dict[str, list[RoundResult]], list[AgentData]]:
    comms, datas, results = InMemoryBackend.spawn(len(solvers)), [data() for _ in solvers], dict[str, list[RoundResult]]()
    managers = [
        GameManager(d, AgentReward("tiny-random", env="local"), Scripted(s, limit), None, c, LocalCoordinator(),
                    GameConfig(max_rounds=rounds, exchange_timeout=30), trust=TrustConfig(max_soft_drops=2))
        for c, d, s, limit in zip(comms, datas, solvers, limits)
    ]  # fmt: skip
    threads = [threading.Thread(target=lambda m=m: results.__setitem__(m.peer_id, m.run())) for m in managers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert sorted(results) == [f"peer-{i}" for i in range(len(solvers))], "a peer did not finish"
    return results, datas


def test_own_success_promotes_the_swarms_does_not_and_the_level_is_checkpointed() -> None:
    # peer-0 solves calculator-1 only; peer-1 solves nothing (but scores peer-0's solved episodes).
    results, (solver, failer) = play(3, [{"calculator-1": True}, {}])
    # Round 0: both on calculator-1, the same instances: each accepts the other's 4 episodes.
    assert all(r.metrics["swarm/peers_s0"] == 2 and not r.dropped for r in (results["peer-0"][0], results["peer-1"][0]))
    assert results["peer-0"][0].rewards == {"peer-0": 1.0, "peer-1": 0.0}  # as each scored them by replay
    assert results["peer-1"][0].rewards == {"peer-0": 1.0, "peer-1": 0.0}
    # peer-0: 4 of 4 own successes at calculator-1 -> promoted; then 0 of 4 at calculator-2: stays.
    assert solver.state() == {"curriculum": {"level": "calculator-2", "recent": [False] * 4}}
    assert {t.metadata["task"] for t in solver.round_tasks(7)} == {"calculator-2"}  # every slot plays the level
    # peer-1 held 4 successes a round (peer-0's) and was never promoted: only its own count.
    assert failer.state() == {"curriculum": {"level": "calculator-1", "recent": [False] * 4}}
    # From round 1 the two play different levels: neither accepts the other's episodes (not one of
    # its tasks), and that is a difference of view, not a fault: 4 such bodies a round, over
    # trust.max_soft_drops=2, and nobody is quarantined.
    later = [r for rounds in results.values() for r in rounds[1:]]
    assert all(sum(r.dropped.values()) == 4 and r.metrics["trust/quarantined"] == 0 for r in later), [
        (r.dropped, r.metrics["trust/quarantined"]) for r in later
    ]
    assert all(set(r.rewards) == {r.peer_id} for r in later), [r.rewards for r in later]
    # The level is what a resumed peer starts from.
    fresh = data()
    fresh.restore(solver.state())
    assert fresh.state() == solver.state() and fresh.round_tasks(3)[0].metadata["task"] == "calculator-2"
    for bad, why in [({"level": "sql"}, "not one of the levels"), ({"level": "calculator-2", "recent": "no"}, "true/false"),
                     ({"level": "calculator-2", "recent": ["false"]}, "true/false"), (5, "a mapping"), ({"recent": []}, "a mapping")]:  # fmt: skip
        with pytest.raises(ValueError, match=why):
            fresh.restore({"curriculum": bad})
    fresh.restore({"curriculum": {"level": "calculator-1", "recent": [True] * 50}})
    assert fresh.state() == {"curriculum": {"level": "calculator-1", "recent": [True] * 4}}  # the window, not more


def test_a_curriculum_needs_the_agent_reward_and_excludes_mixes() -> None:
    with pytest.raises(ValueError, match="choose one"):
        AgentData(mixes=[["calculator-1"]], curriculum={"levels": LEVELS})
    with pytest.raises(ValueError, match="unknown"):
        AgentData(curriculum={"levels": ["calculator-1", "chess"]})
    with pytest.raises(TypeError, match="patience"):
        AgentData(curriculum={"levels": LEVELS, "patience": 3})
    with pytest.raises(ValueError, match="each once"):
        AgentData(curriculum={"levels": ["calculator-1", "calculator-1"]})
    with pytest.raises(ValueError, match="at least one"):
        AgentData(curriculum={"levels": []})


def test_peers_whose_own_settings_differ_do_not_punish_each_other() -> None:
    """Two honest peers on one level, one with a smaller max_new_tokens (its own setting, not the
    task's): it cannot train on the other's longer turns and drops them as ``local``, which is
    never held against the sender (it was a counted refusal, and quarantined it)."""
    results, _ = play(2, [{"calculator-1": True}, {"calculator-1": True}], limits=(128, 40))
    short = results["peer-1"]
    assert all(r.dropped.get("peer-0") == 4 and r.metrics["trust/quarantined"] == 0 for r in short), [r.dropped for r in short]
    assert all(r.metrics["trust/quarantined"] == 0 for r in results["peer-0"])
