"""The sandbox and the episode rules of a worker's SessionHost, with real sandboxed children.

A tool that hangs, spins, eats memory, crashes or reaches for the network or files ends its
session with an error message; the host (the worker) carries on with a fresh child.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from genrl_swarm.envd import Answer, InvalidRequest, SessionNotFound, StepResult, TaskSpec, ToolCall, ToolError
from genrl_swarm.envd.host import HostConfig, SessionHost
from genrl_swarm.envd.jobs import SandboxLimits
from genrl_swarm.envd.types import MAX_TEXT

LIMITS = SandboxLimits(memory_mb=256, cpu_seconds=0.5, wall_seconds=2.0)


class Hosted:
    """A SessionHost on an event loop in a background thread (the worker's loop, in-process)."""

    def __init__(self, config: HostConfig) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.host = SessionHost(config)
        self.run(self.host.start())
        self.ids = iter(f"{i:016x}" for i in range(1, 1 << 20))

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def new(self, task: str = "probe", **limits: int) -> str:
        session = next(self.ids)
        self.run(self.host.reset(session, TaskSpec(task, 0, **limits)))
        return session

    def step(self, session: str, action: Any, tokens: int = 0) -> StepResult:
        return self.run(self.host.step(session, action, tokens))  # type: ignore[no-any-return]

    def close(self) -> None:
        self.run(self.host.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def hosted() -> Iterator[Hosted]:
    h = Hosted(HostConfig(tasks=("calculator", "probe"), sandboxes=2, sandbox=LIMITS, max_turns=6, max_tokens=100, max_bytes=4000))
    yield h
    h.close()


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name, arguments)


def assert_worker_fine(h: Hosted) -> None:
    """A new session on the same host still gets its tool run."""
    session = h.new()
    assert h.step(session, call("echo", text="still here")).message.content == "still here"
    h.host.close(session)


def test_tool_code_runs_in_a_child_process_not_here(hosted: Hosted) -> None:
    pid = int(hosted.step(hosted.new(), call("pid")).message.content)
    assert pid != os.getpid()


@pytest.mark.parametrize(
    "tool, arguments, says",
    [
        ("sleep", {"seconds": 600}, "did not finish within 2 s"),  # hangs without CPU: the wall clock
        ("allocate", {"megabytes": 2048}, "out of memory (limit 256 MiB)"),  # RLIMIT_AS
        ("crash", {}, "crashed (SIGABRT)"),
        ("connect", {"host": "127.0.0.1", "port": 9}, "sandbox: socket"),
        ("read_file", {"path": "/etc/hostname"}, "outside the scratch directory"),
    ],
)
def test_a_misbehaving_tool_ends_its_session_not_the_worker(hosted: Hosted, tool: str, arguments: dict[str, Any], says: str) -> None:
    session, deaths = hosted.new(), hosted.host.pool.deaths
    start = time.monotonic()
    result = hosted.step(session, call(tool, **arguments))
    assert result.done and result.finish_reason == "error" and result.reward == 0.0
    assert says in result.message.content and "the episode ends" in result.message.content
    assert time.monotonic() - start < 20
    assert session not in hosted.host.sessions
    assert hosted.host.pool.deaths - deaths == (1 if tool in ("sleep", "allocate", "crash") else 0)
    assert_worker_fine(hosted)


def test_tool_code_sees_no_variable_of_the_peer_and_only_its_view() -> None:
    """The kernel's sandbox (sandbox.jail): an empty environment, and a filesystem holding the
    interpreter, the packages and the scratch root, not the peer's working directory or /etc."""
    os.environ["GENRL_SWARM_PRIVATE_KEY"] = "canary"
    try:
        h = Hosted(HostConfig(tasks=("probe",), sandboxes=1, sandbox=LIMITS))
    finally:
        del os.environ["GENRL_SWARM_PRIVATE_KEY"]
    try:
        assert "jailed" in h.host.pool.isolation and "NOT JAILED" not in h.host.pool.isolation
        assert "GENRL_SWARM_PRIVATE_KEY" not in h.step(h.new(), call("environ")).message.content
        top = h.step(h.new(), call("listdir", path="/")).message.content.split()
        assert "home" not in top and "proc" in top
        assert h.step(h.new(), call("listdir", path="/etc")).message.content.split() == ["ld.so.cache"]
        repo = Path(__file__).resolve().parents[1]  # holds README.md, the run directories, maybe keys
        assert (repo / "README.md").is_file()
        assert "README.md" not in h.step(h.new(), call("listdir", path=str(repo))).message.content.split()
    finally:
        h.close()


def test_a_tools_cpu_is_read_from_the_tool_process_itself() -> None:
    """Under bwrap the tool is a grandchild: its CPU clock, not bwrap's, is what is charged."""
    from genrl_swarm.envd.jobs import CallJob
    from genrl_swarm.envd.sandbox_pool import SandboxPool

    async def spin(root: Path) -> tuple[float, bytes]:
        pool = SandboxPool(1, LIMITS, root)
        await pool.start()
        try:
            (child,) = pool._all
            cmdline = Path(f"/proc/{child.pid}/cmdline").read_bytes()
            _, cpu = await pool.run(CallJob("probe", "spin", {"seconds": 0.3}, None, None))
            return cpu, cmdline
        finally:
            await pool.close()

    cpu, cmdline = asyncio.run(spin(Path(tempfile.mkdtemp())))
    assert b"genrl_swarm.envd.sandbox" in cmdline and b"bwrap" not in cmdline
    assert cpu > 0.02  # bwrap's own clock would read ~0


def test_a_spinning_tool_hits_its_cpu_limit() -> None:
    """RLIMIT_CPU ends it (SIGXCPU) long before the generous wall clock would."""
    h = Hosted(HostConfig(tasks=("probe",), sandboxes=1, sandbox=SandboxLimits(memory_mb=256, cpu_seconds=0.5, wall_seconds=30.0)))
    try:
        result = h.step(h.new(), call("spin", seconds=600))
        assert result.finish_reason == "error" and "more than its 0.5 s of CPU time" in result.message.content
        assert_worker_fine(h)
    finally:
        h.close()


def test_scratch_is_private_and_removed(hosted: Hosted) -> None:
    session = hosted.new()
    written = Path(hosted.step(session, call("write_scratch", text="hi")).message.content.removeprefix("wrote "))
    assert written.read_text() == "hi" and written.parent.name == session
    hosted.host.close(session)
    assert not written.parent.exists()


def test_model_mistakes_are_messages_and_cost_turns(hosted: Hosted) -> None:
    session = hosted.new()
    unknown = hosted.step(session, call("rm", path="/"))
    assert not unknown.done and unknown.message.role == "tool" and "no tool 'rm'" in unknown.message.content
    bad = hosted.step(session, call("echo", text=5))
    assert not bad.done and "'text' must be a string" in bad.message.content
    garbled = hosted.step(session, ToolError("no tool call or answer found"))
    assert not garbled.done and garbled.message.role == "user" and garbled.turn == 3
    done = hosted.step(session, Answer("ok"))
    assert (done.done, done.finish_reason, done.reward) == (True, "answer", 1.0)
    with pytest.raises(SessionNotFound):
        hosted.step(session, Answer("ok"))


def test_limits_end_episodes(hosted: Hosted) -> None:
    session = hosted.new(max_turns=2)
    assert not hosted.step(session, call("echo", text="a")).done
    last = hosted.step(session, call("echo", text="b"))
    assert (last.done, last.finish_reason, last.message.content) == (True, "turn_limit", "b")
    tokens = hosted.step(hosted.new(), call("echo", text="a"), tokens=101)  # the host's max_tokens is 100
    assert (tokens.done, tokens.finish_reason) == (True, "token_limit")
    session = hosted.new()
    hosted.step(session, call("echo", text="x" * 900))
    hosted.step(session, call("echo", text="x" * 900))
    over = hosted.step(session, call("echo", text="x" * 900))  # past the 4000 bytes of calls and results
    assert (over.done, over.finish_reason) == (True, "error") and "bytes" in over.message.content
    limits = hosted.run(hosted.host.reset("00000000000000ff", TaskSpec("probe", 0, max_turns=999))).limits
    assert limits.max_turns == 6  # a spec cannot raise the server's ceiling


def test_one_step_at_a_time_per_session(hosted: Hosted) -> None:
    session = hosted.new()

    async def both() -> list[Any]:
        slow = hosted.host.step(session, call("sleep", seconds=0.5))
        return await asyncio.gather(slow, hosted.host.step(session, call("echo", text="x")), return_exceptions=True)

    first, second = hosted.run(both())
    assert isinstance(first, StepResult) and isinstance(second, InvalidRequest)


def test_unknown_task_is_an_invalid_request(hosted: Hosted) -> None:
    with pytest.raises(InvalidRequest, match="offers calculator, probe"):
        hosted.run(hosted.host.reset("00000000000000fe", TaskSpec("sql", 0)))


@pytest.mark.parametrize(
    "action",
    [ToolError("x" * MAX_TEXT), ToolCall("echo", {"k" * 70_000: 1})],
    ids=["tool-error-echo", "unknown-argument-name"],
)
def test_echoed_model_text_is_cut_to_fit_the_wire(hosted: Hosted, action: Any) -> None:
    """A message that echoes the model's own text (an error, an argument name) stays within
    max_result_chars, so it always passes the validated decode on the other side."""
    session = hosted.new()
    result = hosted.step(session, action)
    assert not result.done and "(cut: " in result.message.content
    assert len(result.message.content) <= hosted.host.config.max_result_chars + 100
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(result), type=StepResult) == result  # what the controller does
    hosted.host.close(session)
