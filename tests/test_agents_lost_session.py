"""A lost environment session while acting ends that one episode as ``error``; the peer and its
other episodes go on, and a receiver scores the cut episode 0 without blaming its sender.
Real service: an in-process ``LocalEnv`` with two workers, one of them SIGKILLed mid-episode."""

from __future__ import annotations

import os
import signal
import time

import pytest

pytest.importorskip("torch")

from genrl_swarm.envd import Action, EnvClient, Reset, SessionLost, StepResult, TaskSpec
from genrl_swarm.envd.controller import EnvdConfig
from genrl_swarm.envd.host import HostConfig
from genrl_swarm.envd.local import LocalEnv
from genrl_swarm.envd.protocol import Stats
from genrl_swarm.games.agent import agent_task
from genrl_swarm.paradigms.agents.episodes import Session, replay, task_spec
from genrl_swarm.paradigms.agents.policy import AgentPolicy

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]


class KillsAWorker(EnvClient):
    """``env``, SIGKILLing the worker of the first session it opened just before that session's
    first step reaches it (the kill is real; the step then meets a dead worker)."""

    def __init__(self, env: LocalEnv) -> None:
        self.env, self.victim, self.killed = env, "", False

    def reset(self, task: TaskSpec) -> Reset:
        first = self.env.reset(task)
        self.victim = self.victim or first.session
        return first

    def step(self, session: str, action: Action, tokens: int = 0) -> StepResult:
        if session == self.victim and not self.killed:
            self.killed = True
            os.kill(self.env.controller.routes[session].worker.pid, signal.SIGKILL)
        return self.env.step(session, action, tokens)

    def close(self, session: str) -> bool:
        return self.env.close(session)

    def stats(self) -> Stats:
        return self.env.stats()

    def shutdown(self) -> None:
        """The wrapped service is the fixture's."""


def both_workers_up(env: LocalEnv) -> None:
    deadline = time.monotonic() + 120  # generous: the machine may be loaded
    while len(env.stats().workers) < 2:
        assert time.monotonic() < deadline, "the killed worker was not restarted"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def env() -> LocalEnv:
    client = LocalEnv(EnvdConfig(workers=2, host=HostConfig(sandboxes=1)))
    yield client
    client.shutdown()


def test_a_lost_session_ends_one_episode_and_the_peer_goes_on(env: LocalEnv) -> None:
    killer = KillsAWorker(env)
    policy = AgentPolicy("tiny-random", {"max_new_tokens": 8}, seed=1, env=killer)
    tasks = [agent_task("calculator", seed, 0, 2, 600) for seed in (3, 4)]
    probes = [env.reset(TaskSpec("calculator", 100 + i)).session for i in range(2)]
    assert len({env.controller.routes[p].worker.index for p in probes}) == 2  # two workers to route to
    for p in probes:
        env.close(p)
    played = policy.play([t.input(0) for t in tasks])  # before the fix: SessionLost escaped and the peer's round died
    assert killer.killed
    lost, other = played
    assert lost.episode.finish_reason == "error" and lost.reward == 0.0
    assert [t.role for t in lost.episode.turns] == ["user", "assistant"]  # the model turn it played is kept
    assert other.episode.finish_reason != "error"  # the other episode, on the other worker, finished normally
    with pytest.raises(SessionLost):  # replaying is strict: a receiver's own failure is never the sender's fault
        replay(lost.episode, task_spec(tasks[0].metadata), KillsAWorker(env), policy.renderer)
    both_workers_up(env)
    replay(lost.episode, task_spec(tasks[0].metadata), env, policy.renderer)  # a receiver that is fine scores it
    # A cut episode whose last model turn was a tool call: the receiver's step answers where the
    # sender's session died; it scores 0 and is not refused (a difference of view, not a forgery).
    killer = KillsAWorker(env)
    spec = task_spec(tasks[0].metadata)
    s = Session.start(killer, spec, policy.renderer)
    call = [
        *policy.renderer.encode('<tool_call>{"name": "calculate", "arguments": {"expression": "1 + 2"}}</tool_call>'),
        policy.tokenizer.eos_token_id,
    ]
    s.turn(call, [-0.5] * len(call), tolerant=True)
    assert (s.done, s.finish_reason) == (True, "error")
    both_workers_up(env)
    scored = replay(s.episode("t", "d", 0, policy.fingerprint), spec, env, policy.renderer)
    assert (scored.reward, scored.finish_reason) == (0.0, "error")
    policy.play([tasks[1].input(0)])  # the peer still acts (the worker was restarted)
