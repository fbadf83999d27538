"""OpenEnv both ways, with openenv-core's real client and server classes on 127.0.0.1: an OpenEnv
client plays envd's calculator over the WebSocket protocol; our policy (the tiny model) plays an
OpenEnv environment, envd's own and an independent one, through ``OpenEnvClient``."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openenv.core")
uvicorn = pytest.importorskip("uvicorn")

from openenv.core.env_server.http_server import create_fastapi_app  # noqa: E402
from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402

from genrl_swarm.envd import Answer, EnvdConfig, ToolCall, ToolError, connect  # noqa: E402
from genrl_swarm.envd.errors import EnvUnavailable, InvalidRequest  # noqa: E402
from genrl_swarm.envd.host import HostConfig  # noqa: E402
from genrl_swarm.envd.openenv import ActionFormat, OpenEnvClient, openenv_app  # noqa: E402
from genrl_swarm.envd.types import MAX_TEXT, TaskSpec  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def serve(app: Any) -> Iterator[str]:
    """``app`` on a free loopback port in a thread; yields its http:// URL, stops it after."""
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the OpenEnv server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def envd_url() -> Iterator[str]:
    with connect("local", config=EnvdConfig(workers=1, host=HostConfig(sandboxes=1))) as client:
        yield from serve(openenv_app(client, max_sessions=8))


def call(expression: str) -> str:
    return f'<tool_call>{{"name": "calculate", "arguments": {{"expression": "{expression}"}}}}</tool_call>'


# --------------------------------------------------------------------------- an OpenEnv client drives envd
def test_an_openenv_client_plays_envd_calculator(envd_url: str) -> None:
    with GenericEnvClient(envd_url, connect_timeout_s=30, message_timeout_s=60).sync() as env:
        first = env.reset(task="calculator", seed=3)
        obs = first.observation
        question = next(m["content"] for m in obs["messages"] if m["role"] == "user")
        assert not first.done and obs["tools"][0]["function"]["name"] == "calculate" and obs["limits"]["max_turns"] >= 2
        expression = question.split("What is ", 1)[1].split("? Use", 1)[0]
        tool = env.step({"text": call(expression)})
        value = tool.observation["messages"][0]["content"]
        assert not tool.done and tool.observation["messages"][0]["role"] == "tool" and value.lstrip("-").isdigit()
        assert env.state()["step_count"] == 1
        # The typed form of an action works too, and ends the episode with envd's reward.
        end = env.step({"action": {"type": "answer", "text": value}})
        assert end.done and end.reward == 1.0 and end.observation["finish_reason"] == "answer"
        # A wrong answer in a fresh episode scores 0; text that is no action is the model's mistake (a turn).
        env.reset(task="calculator", seed=3)
        miss = env.step({"text": "I think it is about seven"})
        assert not miss.done and miss.observation["messages"][0]["content"].startswith("Error: no tool call or answer")
        assert env.step({"text": "<answer>-1</answer>"}).reward == 0.0


def test_bad_requests_are_one_line_errors(envd_url: str) -> None:
    with GenericEnvClient(envd_url, connect_timeout_s=30, message_timeout_s=60).sync() as env:
        with pytest.raises(RuntimeError, match="Server error") as bad:
            env.reset(task="rm -rf", seed=1)
        assert "\n" not in str(bad.value)
        env.reset(task="calculator", seed=1)
        with pytest.raises(RuntimeError, match="Server error"):
            env.step({"action": {"type": "shell", "cmd": "id"}})  # not one of our actions
        with pytest.raises(RuntimeError, match="Server error"):
            env.step({"text": "x" * (MAX_TEXT + 1)})  # longer than any turn
    ours = OpenEnvClient(envd_url, timeout=30)
    try:
        with pytest.raises(InvalidRequest, match="OpenEnv server at"):
            ours.reset(TaskSpec("nosuchtask", 1))
    finally:
        ours.shutdown()


def test_an_unreachable_server_fails_within_the_deadline() -> None:
    port = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{port.getsockname()[1]}"
    port.close()
    client = OpenEnvClient(url, timeout=3)
    start = time.monotonic()
    try:
        with pytest.raises(EnvUnavailable, match="OpenEnv server"):
            client.reset(TaskSpec("calculator", 1))
    finally:
        client.shutdown()
    assert time.monotonic() - start < 60


# --------------------------------------------------------------------------- our client drives OpenEnv
def test_openenv_client_round_trip_matches_envd(envd_url: str) -> None:
    """ENVD format through OpenEnv gives the same episode as envd directly: same messages, tools, limits, reward."""
    spec = TaskSpec("calculator", 5, max_turns=3)
    with connect("local", config=EnvdConfig(workers=1, host=HostConfig(sandboxes=1))) as direct:
        via = OpenEnvClient(envd_url, timeout=60)
        try:
            a, b = direct.reset(spec), via.reset(spec)
            assert (a.messages, a.tools, a.limits) == (b.messages, b.tools, b.limits)
            expression = a.messages[-1].content.split("What is ", 1)[1].split("? Use", 1)[0]
            for action in (ToolCall("calculate", {"expression": expression}), ToolError("no call found"), Answer("0")):
                ra, rb = direct.step(a.session, action), via.step(b.session, action)
                assert (ra.message, ra.done, ra.reward, ra.finish_reason, ra.turn) == (rb.message, rb.done, rb.reward, rb.finish_reason, rb.turn)
            assert rb.done and via.stats().sessions == 0  # a finished session is closed
        finally:
            via.shutdown()


class GuessAction(Action):
    guess: int


class GuessObservation(Observation):
    feedback: str = ""


class Guess(Environment[GuessAction, GuessObservation, State]):
    """An independent OpenEnv environment: guess the seed's number in 0..3 (reward 1), three tries.
    A guess of 99 makes it answer with far more text than a message may hold."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.target, self.tries, self._state = 0, 0, State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **_: Any) -> GuessObservation:
        self.target, self.tries = (seed or 0) % 4, 0
        return GuessObservation(feedback="guess a number from 0 to 3")

    def step(self, action: GuessAction, timeout_s: float | None = None, **_: Any) -> GuessObservation:
        self.tries += 1
        if action.guess == 99:
            return GuessObservation(feedback="z" * (4 * MAX_TEXT))
        right = action.guess == self.target
        hint = "right" if right else ("higher" if action.guess < self.target else "lower")
        return GuessObservation(feedback=hint, done=right or self.tries >= 3, reward=1.0 if right else 0.0)

    @property
    def state(self) -> State:
        return self._state


@pytest.fixture(scope="module")
def guess_url() -> Iterator[str]:
    yield from serve(create_fastapi_app(Guess, GuessAction, GuessObservation, max_concurrent_envs=8))


def guess_client(url: str, **kw: Any) -> OpenEnvClient:
    schema = {"type": "object", "properties": {"guess": {"type": "integer"}}, "required": ["guess"]}
    return OpenEnvClient(url, format=ActionFormat.TOOL, tool="guess", parameters=schema, timeout=30, **kw)


def test_any_openenv_environment_is_a_task(guess_url: str) -> None:
    client = guess_client(guess_url, max_turns=4)
    try:
        first = client.reset(TaskSpec("guess", 2))
        assert json.loads(first.messages[0].content) == {"feedback": "guess a number from 0 to 3"}
        assert first.tools[0]["function"]["name"] == "guess" and first.limits.max_turns == 4
        low = client.step(first.session, ToolCall("guess", {"guess": 0}))
        assert json.loads(low.message.content) == {"feedback": "higher"} and low.message.role == "tool" and not low.done
        wrong_type = client.step(first.session, ToolCall("guess", {"guess": "two"}))  # the environment refuses it: a turn
        assert not wrong_type.done and "OpenEnv server at" in wrong_type.message.content
        huge = client.step(first.session, ToolCall("guess", {"guess": 99}))
        assert len(huge.message.content) == MAX_TEXT  # cut to what a message may hold
        right = client.step(first.session, ToolCall("guess", {"guess": 2}))
        assert right.done and right.reward == 1.0 and right.finish_reason == "answer" and right.turn == 4
        # The local turn limit ends an episode the environment would let run on.
        again = client.reset(TaskSpec("guess", 3, max_turns=1))
        out = client.step(again.session, ToolError("no call"))
        assert out.done and out.finish_reason == "turn_limit" and out.reward == 0.0
    finally:
        client.shutdown()


@pytest.mark.slow
def test_our_policy_plays_openenv_environments(envd_url: str, guess_url: str) -> None:
    """The tiny model's AgentPolicy plays through OpenEnvClient: envd's calculator (ENVD format)
    and the independent guessing game (TOOL format); each yields a well-formed Episode."""
    pytest.importorskip("transformers")
    from genrl_swarm.games.agent import agent_task
    from genrl_swarm.paradigms.agents.policy import AgentPolicy

    for client in (OpenEnvClient(envd_url, timeout=60), guess_client(guess_url, max_turns=2)):
        try:
            policy = AgentPolicy("tiny-random", {"max_new_tokens": 8}, seed=1, env=client)
            played = policy.play([agent_task("calculator", 7, 0, 2, 1000).input(0)])
            episode = played[0].episode
            roles = [t.role for t in episode.turns]
            assert roles[0] in ("system", "user") and "assistant" in roles and episode.finish_reason in ("answer", "turn_limit", "token_limit")
            assert sum(episode.loss_mask) == sum(len(t.token_ids) for t in episode.turns if t.role == "assistant") > 0
            assert client.stats().sessions == 0
        finally:
            client.shutdown()


def test_cli_serves_openenv_until_terminated() -> None:
    """``genrl-swarm envd --openenv``: the printed ws:// address serves an OpenEnv client; SIGTERM stops it cleanly."""
    exe = shutil.which("genrl-swarm", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("package not installed in this environment")
    proc = subprocess.Popen([exe, "envd", "--openenv", "--port", "0", "--workers", "1", "--sandboxes", "1"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # bounded by the pytest timeout; printed once the socket is bound
        url = re.search(r"OpenEnv on (ws://\S+)/ws", line)[1]  # type: ignore[index]
        with GenericEnvClient(url, connect_timeout_s=60, message_timeout_s=60).sync() as env:
            assert env.reset(task="calculator", seed=1).observation["limits"]["max_turns"] == 16
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(
    ("reply", "envd", "why"),
    [
        ({"observation": {"messages": [{"role": "root", "content": "hi"}]}}, True, "malformed reply"),  # no such role
        ({"observation": {"messages": [{"role": "tool", "content": "x" * (MAX_TEXT + 1)}]}}, True, "malformed reply"),
        ({"observation": {"messages": [], "limits": "lots"}}, True, "malformed reply"),
        ({"observation": {"feedback": "ok"}, "reward": float("inf")}, False, "reward of inf"),
        ({"observation": {"feedback": "ok"}, "reward": "1"}, False, "malformed reply"),
        ({"observation": ["not", "a", "dict"]}, False, "malformed reply"),
    ],
)
def test_a_servers_reply_is_checked_in_our_types_first(reply: dict[str, Any], envd: bool, why: str) -> None:
    """What openenv-core's client parsed from a (possibly hostile) server is converted into our
    msgspec types before anything reads it: a bad reply is a one-line InvalidRequest."""
    from openenv.core.client_types import StepResult as OpenEnvStep

    from genrl_swarm.envd.openenv import _checked

    got = OpenEnvStep(observation=reply["observation"], reward=reply.get("reward"), done=reply.get("done", False))
    with pytest.raises(InvalidRequest, match=why) as bad:
        _checked(got, envd)
    assert "\n" not in str(bad.value) and len(str(bad.value)) < 400
