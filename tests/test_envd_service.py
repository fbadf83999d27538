"""The environment service for real: gRPC servers on 127.0.0.1 with several worker processes.

Covers episodes over gRPC, a worker killed mid-session (its sessions are lost with a clear
error, the others carry on, the worker comes back), TTL eviction, the session cap, bad input,
deadlines, the in-process mode behind the same interface, and ``genrl-swarm envd`` itself.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import msgspec
import pytest

grpc = pytest.importorskip("grpc")

from genrl_swarm.envd import (
    EnvClient,
    EnvdConfig,
    EnvError,
    Environment,
    EnvUnavailable,
    InvalidRequest,
    Overloaded,
    SessionLost,
    SessionNotFound,
    TaskSpec,
    ToolCall,
    connect,
    parse_action,
)
from genrl_swarm.envd.client import RemoteEnv
from genrl_swarm.envd.host import HostConfig
from genrl_swarm.envd.jobs import SandboxLimits
from genrl_swarm.envd.protocol import WorkerReply
from genrl_swarm.envd.server import EnvServer
from genrl_swarm.envd.types import MAX_TEXT, Message, StepResult, ToolError
from genrl_swarm.envd.workers import WorkerLink
from genrl_swarm.sandbox.frames import pack

pytestmark = pytest.mark.slow  # gRPC servers and worker processes

T = TypeVar("T")
TASKS = ("calculator", "sql", "kvstore", "probe")
EXE = shutil.which("genrl-swarm", path=str(Path(sys.executable).parent))


class Served:
    """An EnvServer on its own event loop thread in this process (so tests can see its routes)."""

    def __init__(self, config: EnvdConfig) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.server = EnvServer(config)
        self.address = f"127.0.0.1:{asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(120)}"
        self.controller = self.server.controller

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 60.0) -> T:
    """Poll ``check`` (at most ``timeout`` seconds) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout:g} s")


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    host = HostConfig(tasks=tuple(TASKS), sandboxes=1, sandbox=SandboxLimits(memory_mb=256, wall_seconds=20.0))
    s = Served(EnvdConfig(workers=3, host=host))
    yield s
    s.stop()


@pytest.fixture
def client(served: Served) -> Iterator[RemoteEnv]:
    c = RemoteEnv(served.address, timeout=30.0)
    yield c
    c.shutdown()


def play_calculator(client: EnvClient, seed: int, wrong: bool = False) -> float:
    """A scripted agent: call the calculator on the question's expression, answer its result."""
    env = Environment(client)
    first = env.reset(TaskSpec("calculator", seed))
    assert [m.role for m in first.messages] == ["system", "user"] and first.tools[0]["function"]["name"] == "calculate"
    expression = re.search(r"What is (.+)\?", first.messages[1].content)[1]  # type: ignore[index]
    result = env.step(f'<tool_call>{{"name": "calculate", "arguments": {{"expression": "{expression}"}}}}</tool_call>')
    assert result.message.role == "tool" and not result.done
    answer = int(result.message.content) + (1 if wrong else 0)
    final = env.step(f"The value is <answer>{answer}</answer>")
    assert final.done and final.finish_reason == "answer"
    return final.reward


def test_episodes_over_grpc_on_several_workers(served: Served, client: RemoteEnv) -> None:
    assert [play_calculator(client, seed, wrong=seed % 2 == 1) for seed in range(4)] == [1.0, 0.0, 1.0, 0.0]
    sessions = [client.reset(TaskSpec("probe", i)).session for i in range(6)]
    assert sorted(len(w.sessions) for w in served.controller.workers) == [2, 2, 2]  # least-loaded routing
    tools = {client.step(s, ToolCall("process")).message.content for s in sessions}  # pid:[inode]:pid, unique across namespaces
    hosts = {f"{os.readlink(f'/proc/{pid}/ns/pid')}:{pid}" for pid in (*(w.pid for w in served.controller.workers), os.getpid())}
    assert len(tools) == 3 and not tools & hosts  # tools run in each worker's sandbox
    for s in sessions:
        assert client.close(s)
    assert not client.close(sessions[0])


def test_a_worker_killed_mid_session(served: Served, client: RemoteEnv) -> None:
    sessions = [client.reset(TaskSpec("probe", i)).session for i in range(6)]
    victim = served.controller.routes[sessions[0]].worker
    same = [s for s in sessions if served.controller.routes[s].worker is victim]
    others = [s for s in sessions if s not in same]
    restarts = client.stats().restarts
    with ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(client.step, same[0], ToolCall("sleep", {"seconds": 15}))
        time.sleep(1.0)  # the step is in the worker's sandbox by now
        os.kill(victim.pid, signal.SIGKILL)
        with pytest.raises(SessionLost, match=rf"worker {victim.index} \(pid {victim.pid}\) died"):
            in_flight.result(timeout=30)
    with pytest.raises(SessionLost, match="Start a new session"):
        client.step(same[1], ToolCall("echo", {"text": "hello?"}))
    for s in others:  # sessions on the other workers did not notice
        assert client.step(s, ToolCall("echo", {"text": s})).message.content == s
    stats = wait_for("the worker restarted", lambda: (s := client.stats()).restarts > restarts and len(s.workers) == 3 and s)
    assert stats.lost >= len(same)
    assert victim.pid not in {w.pid for w in stats.workers}
    assert play_calculator(client, 7) == 1.0


@pytest.mark.parametrize("attack", ["toolerror", "argname"])
def test_an_echoed_oversized_step_harms_no_other_session(served: Served, client: RemoteEnv, attack: str) -> None:
    """The worker echoes a model's text back (a ToolError, an unknown argument's name). A step
    whose echo would be over MAX_TEXT gets a cut message; the worker and its sessions live on."""
    sessions = [client.reset(TaskSpec("calculator", i)).session for i in range(7)]
    attacker, worker = sessions[0], served.controller.routes[sessions[0]].worker
    victims = [s for s in sessions[1:] if served.controller.routes[s].worker is worker]
    assert victims
    pid, restarts = worker.pid, client.stats().restarts
    action = ToolError("x" * MAX_TEXT) if attack == "toolerror" else ToolCall("calculate", {"k" * 70_000: 1})
    result = client.step(attacker, action)  # not SessionLost
    assert not result.done and "(cut: " in result.message.content and len(result.message.content) <= MAX_TEXT
    for s in victims:
        assert client.step(s, ToolCall("calculate", {"expression": "1+1"})).message.content == "2"
    assert client.step(attacker, ToolCall("calculate", {"expression": "2+2"})).message.content == "4"
    assert worker.alive and worker.pid == pid and client.stats().restarts == restarts
    for s in sessions:
        client.close(s)


def test_an_invalid_reply_fails_only_its_request() -> None:
    """A well-framed reply that fails validation fails the request it answers, with a clear
    error, and the link reads on: the worker is not taken for dead."""
    deaths: list[str] = []

    async def scenario() -> tuple[BaseException | None, WorkerReply, bool]:
        link = WorkerLink(0, 0, HostConfig(), lambda _link, why: deaths.append(why))
        link.alive = True
        loop = asyncio.get_running_loop()
        bad, good = loop.create_future(), loop.create_future()
        link.pending.update({1: bad, 2: good})
        reader = asyncio.StreamReader()
        oversized = StepResult(Message("user", "x" * (MAX_TEXT + 10)), False)  # built without validation, like the worker
        reader.feed_data(pack(msgspec.msgpack.encode(WorkerReply(1, step=oversized))))
        reader.feed_data(pack(msgspec.msgpack.encode(WorkerReply(2, step=StepResult(Message("user", "fine"), False)))))
        reading = loop.create_task(link._read(reader))
        error = await asyncio.wait_for(asyncio.gather(bad, return_exceptions=True), 10)
        reply = await asyncio.wait_for(good, 10)
        alive = link.alive
        link.alive = False  # the end of the fake stream below is not a death to report
        reader.feed_eof()
        await asyncio.wait_for(reading, 10)
        return error[0], reply, alive

    error, reply, alive = asyncio.run(scenario())
    assert isinstance(error, EnvError) and not isinstance(error, SessionLost)
    assert "invalid reply" in str(error) and "step.message.content" in str(error)
    assert reply.step is not None and reply.step.message.content == "fine"
    assert alive and not deaths


def test_bad_requests_get_clear_statuses(served: Served, client: RemoteEnv) -> None:
    channel = grpc.insecure_channel(served.address)
    step = channel.unary_unary("/genrl.envd.Env/Step")
    with pytest.raises(grpc.RpcError) as garbage:
        step(b"\x93\x01\x02", timeout=10)
    assert garbage.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "bad Step request" in garbage.value.details()
    with pytest.raises(grpc.RpcError) as huge:
        step(b"\x00" * (1 << 20), timeout=10)
    assert huge.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    channel.close()
    with pytest.raises(SessionNotFound):
        client.step("0123456789abcdef", ToolCall("echo", {"text": "x"}))
    with pytest.raises(InvalidRequest, match="unknown task 'chess'"):
        client.reset(TaskSpec("chess"))
    impatient = RemoteEnv(served.address, timeout=0.5)
    session = client.reset(TaskSpec("probe")).session
    with pytest.raises(EnvUnavailable, match="DEADLINE_EXCEEDED"):
        impatient.step(session, ToolCall("sleep", {"seconds": 3}))
    impatient.shutdown()
    nobody = RemoteEnv("127.0.0.1:1", timeout=2.0)
    with pytest.raises(EnvUnavailable, match="is `genrl-swarm envd` running there"):
        nobody.reset(TaskSpec("calculator"))
    nobody.shutdown()


def test_ttl_evicts_idle_sessions_and_the_cap_holds() -> None:
    served = Served(EnvdConfig(workers=1, max_sessions=3, ttl=1.0, host=HostConfig(tasks=("probe",), sandboxes=1)))
    client = RemoteEnv(served.address, timeout=30.0)
    try:
        idle, busy, third = (client.reset(TaskSpec("probe")).session for _ in range(3))
        with pytest.raises(Overloaded, match="maximum of 3 sessions"):
            client.reset(TaskSpec("probe"))
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:  # ``busy`` keeps stepping, ``idle`` and ``third`` do not
            client.step(busy, ToolCall("echo", {"text": "."}))
            time.sleep(0.25)
        with pytest.raises(SessionNotFound, match="expired after 1 s without a step"):
            client.step(idle, ToolCall("echo", {"text": "x"}))
        assert client.step(busy, ToolCall("echo", {"text": "alive"})).message.content == "alive"
        assert client.stats().evicted == 2
        client.reset(TaskSpec("probe"))  # the cap counts live sessions only
    finally:
        client.shutdown()
        served.stop()


def test_in_process_mode_has_the_same_interface() -> None:
    with connect("local", config=EnvdConfig(workers=1, host=HostConfig(sandboxes=1))) as local:
        assert play_calculator(local, 3) == 1.0
        assert play_calculator(local, 4, wrong=True) == 0.0
        session = local.reset(TaskSpec("kvstore", 1)).session
        assert (
            local.step(session, parse_action('<tool_call>{"name": "get", "arguments": {"key": "nope"}}</tool_call>')).message.content
            == "Error: no key 'nope'"
        )
        with pytest.raises(SessionNotFound):
            local.step("0123456789abcdef", ToolCall("get", {"key": "a"}))


@pytest.mark.skipif(EXE is None, reason="package not installed in this environment")
def test_cli_serves_until_terminated() -> None:
    proc = subprocess.Popen([str(EXE), "envd", "--port", "0", "--workers", "1", "--sandboxes", "1"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # bounded by the pytest timeout; the server prints it once ready
        address = re.search(r"listening on (\S+) ", line)[1]  # type: ignore[index]
        with connect(address, timeout=30.0) as remote:
            assert remote.reset(TaskSpec("calculator")).limits.max_turns == 16
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143  # 128 + SIGTERM: stopped, not finished
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
