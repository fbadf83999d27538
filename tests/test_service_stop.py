"""Stopping the long-running servers the way an operator does: ``genrl-swarm dashboard`` and
``genrl-swarm envd`` get a real SIGINT or SIGTERM while serving on 127.0.0.1 (the dashboard with
an event stream open). Each must exit 130/143 without a traceback, leave no child process and
free its port. Deadlines are generous (a loaded 2-core machine); nothing asserts speed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from genrl_swarm.comm.hivemind.process import children, running

pytestmark = pytest.mark.slow  # real server processes

STARTUP_S = 60.0
STOP_S = 30.0


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def start(args: list[str], out: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The command in its own session; returns it and the port from its first line."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "genrl_swarm.cli", *args], stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        first = out.read_text().splitlines()[:1]
        if first and ("listening on" in first[0] or first[0].startswith("dashboard:")):
            port = int(first[0].split("127.0.0.1:")[1].split()[0].strip("/").split("/")[0])
            return proc, port
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"did not start: {out.read_text()}")


def stop_and_check(proc: subprocess.Popen[bytes], port: int, sig: signal.Signals, out: Path) -> None:
    kids = descendants(proc.pid)
    proc.send_signal(sig)
    try:
        code = proc.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"still running {STOP_S:g} s after {sig.name}: {out.read_text()}") from None
    text = out.read_text()
    assert code == 128 + int(sig), (code, text)
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    deadline = time.monotonic() + STOP_S
    while any(running(k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [k for k in kids if running(k)], f"children left behind: {kids}"
    with socket.socket() as s:  # the port is free again: a new server can listen on it (as the CLIs bind)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))  # Linux refuses this while any socket still listens there
        s.listen()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_dashboard_stops_on_signal_with_a_stream_open(tmp_path: Path, sig: signal.Signals) -> None:
    pytest.importorskip("uvicorn")
    run = tmp_path / "run"
    run.mkdir()
    out = tmp_path / "dashboard.out"
    proc, port = start(["dashboard", "--run-dir", str(run), "--port", "0"], out)
    stream = socket.create_connection(("127.0.0.1", port), timeout=STOP_S)
    try:
        stream.sendall(b"GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert stream.recv(64).startswith(b"HTTP/1.1 200"), "the event stream did not open"
        stop_and_check(proc, port, sig, out)
    finally:
        stream.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_envd_stops_on_signal(tmp_path: Path, sig: signal.Signals) -> None:
    pytest.importorskip("grpc")
    out = tmp_path / "envd.out"
    proc, port = start(["envd", "--port", "0", "--workers", "1", "--tasks", "calculator"], out)
    assert descendants(proc.pid), "envd started no worker process"
    stop_and_check(proc, port, sig, out)
    assert f"envd stopping ({sig.name})" in out.read_text()
