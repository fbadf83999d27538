"""The dashboard server: the token on every request (the event stream too), the loopback's Host
check, binding elsewhere only with --allow-remote, and updates pushed without a reload."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
from genrl_swarm.dashboard.background import Background  # noqa: E402
from genrl_swarm.dashboard.hub import Hub  # noqa: E402
from genrl_swarm.dashboard.runs import RunWatcher  # noqa: E402
from genrl_swarm.dashboard.serve import TOKEN_ENV, DashboardError, check  # noqa: E402

TOKEN = "test-token-0123456789"
PATHS = ["/", "/assets/app.js", "/assets/app.css", "/api/snapshot", "/api/events"]


def write_rows(path: Path, rounds: range, peer: str = "peer-0") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.writelines(json.dumps({"round": r, "peer": peer, "reward/own": 0.5, "reward/cumulative": 0.5 * (r + 1), "wins": r}) + "\n" for r in rounds)


def fast_hub(run_dir: Path) -> Hub:
    return Hub(RunWatcher([run_dir]), interval=0.05, min_push=0.05)


def get(url: str, path: str, headers: dict[str, str] | None = None, stream: bool = False) -> tuple[int, http.client.HTTPResponse]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.request("GET", path, headers=headers or {})
    response = conn.getresponse()
    if stream:
        return response.status, response
    if response.getheader("content-type", "").startswith("text/event-stream"):
        response.close()  # a stream never ends: its headers say enough
    else:
        response.read()
    return response.status, response


def next_event(response: http.client.HTTPResponse) -> dict[str, Any]:
    """The next ``snapshot`` event of a server-sent event stream (keep-alive comments skipped)."""
    fields: dict[str, str] = {}
    while True:
        line = response.fp.readline().decode().rstrip("\n")
        if line == "" and "data" in fields:
            return json.loads(fields["data"])
        if line and not line.startswith(":"):
            key, _, value = line.partition(": ")
            fields[key] = value


def test_every_request_needs_the_token_once_one_is_set(tmp_path: Path) -> None:
    write_rows(tmp_path / "run" / "peer-0" / "metrics.jsonl", range(2))
    with Background(fast_hub(tmp_path / "run"), token=TOKEN) as url:
        for path in PATHS:
            assert get(url, path)[0] == 401, path
            assert get(url, path + ("&" if "?" in path else "?") + "token=wrong-token-0123456789")[0] == 401, path
            assert get(url, path, {"Authorization": f"Bearer {TOKEN}x"})[0] == 401, path
        status, response = get(url, f"/?token={TOKEN}")
        assert status == 200
        cookie = response.getheader("set-cookie", "").split(";")[0]
        assert cookie == f"genrl_dashboard_token={TOKEN}" and "HttpOnly" in response.getheader("set-cookie", "")
        for path in PATHS[1:4]:
            assert get(url, path, {"Cookie": cookie})[0] == 200, path
            assert get(url, path, {"Authorization": f"Bearer {TOKEN}"})[0] == 200, path
        status, stream = get(url, f"/api/events?token={TOKEN}", stream=True)
        assert status == 200 and stream.getheader("content-type", "").startswith("text/event-stream")
        assert [p["id"] for p in next_event(stream)["peers"]] == ["peer-0"]
        stream.close()


def test_the_loopback_answers_only_to_a_loopback_host_header(tmp_path: Path) -> None:
    """A page elsewhere that rebinds its DNS name to 127.0.0.1 must not read the swarm."""
    with Background(fast_hub(tmp_path)) as url:
        port = urlsplit(url).port
        assert get(url, "/api/snapshot")[0] == 200
        assert get(url, "/api/snapshot", {"Host": f"localhost:{port}"})[0] == 200
        assert get(url, "/api/snapshot", {"Host": f"attacker.example:{port}"})[0] == 403
        assert get(url, "/api/events", {"Host": "attacker.example"})[0] == 403


def test_a_new_row_is_pushed_to_an_open_stream(tmp_path: Path) -> None:
    metrics = tmp_path / "run" / "peer-0" / "metrics.jsonl"
    write_rows(metrics, range(3))
    with Background(fast_hub(tmp_path / "run")) as url:
        status, stream = get(url, "/api/events", stream=True)
        first = next_event(stream)
        assert first["progress"][0]["rounds_done"] == 3 and first["curves"]["x"] == [0, 1, 2]
        write_rows(metrics, range(3, 5))
        second = next_event(stream)
        assert second["version"] > first["version"] and second["curves"]["x"] == [0, 1, 2, 3, 4]
        assert second["leaderboard"][0]["cumulative"] == 2.5
        stream.close()


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "genrl_swarm.cli", "dashboard", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def test_binding_elsewhere_needs_allow_remote_and_then_a_token(tmp_path: Path) -> None:
    from genrl_swarm.cli import _parser

    for host in ("0.0.0.0", "192.168.1.5", "::", "example.org"):
        with pytest.raises(DashboardError, match="--allow-remote"):  # checked before anything is bound
            check(_parser().parse_args(["dashboard", "--run-dir", str(tmp_path), "--host", host]))
    assert check(_parser().parse_args(["dashboard", "--run-dir", str(tmp_path), "--host", "::1"]))[1]  # the loopback
    remote = run_cli("--run-dir", str(tmp_path), "--host", "0.0.0.0", "--port", "0", "--allow-remote", env={TOKEN_ENV: ""})
    try:
        assert remote.stdout is not None
        line = remote.stdout.readline()
        assert line.startswith("dashboard: http://0.0.0.0:"), line
        link = urlsplit(line.split()[1])
        token = link.query.removeprefix("token=")
        assert len(token) >= 16, "a token is generated and printed"
        local = f"http://127.0.0.1:{link.port}/"
        assert get(local, "/api/snapshot")[0] == 401
        assert get(local, f"/api/snapshot?token={token}", {"Host": "swarm.example"})[0] == 200  # any host name, with the token
    finally:
        remote.terminate()
        remote.wait(timeout=30)


def test_bad_options_are_one_line_before_anything_is_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from genrl_swarm.cli import main
    from genrl_swarm.dashboard import serve

    def bind(host: str, port: int) -> None:
        raise AssertionError("a bad option must stop the command before it binds")

    monkeypatch.setattr(serve, "bind", bind)
    monkeypatch.delenv("GENRL_SWARM_CONTRACT", raising=False)
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    for argv, says in (
        ([], "nothing to show"),
        (["--run-dir", str(tmp_path), "--token", "short"], "16-256 characters"),
        (["--run-dir", str(tmp_path), "--token", "0123456789abcdef<script>"], "16-256 characters"),
        (["--rpc-url", "http://127.0.0.1:9"], "--contract"),
        (["--peer-status", "ftp://x"], "not an http(s) URL"),
        (["--run-dir", str(tmp_path), "--max-points", "2"], "--max-points"),
    ):
        assert main(["dashboard", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("genrl-swarm: dashboard: ") and says in err and err.count("\n") == 1, err


def test_the_loopback_host_check_parses_strictly(tmp_path: Path) -> None:
    with Background(fast_hub(tmp_path)) as url:
        port = urlsplit(url).port
        for host in (f"127.0.0.1:{port}", "[::1]:8050", "[::1]", "LOCALHOST"):
            assert get(url, "/api/snapshot", {"Host": host})[0] == 200, host
        for host in (
            "127.0.0.1:80@evil.com",
            "[::1]evil",
            "[::1]:80@evil.com",
            "localhost:80:81",
            "localhost:http",
            "localhost:",
            "127.0.0.1 evil.com",
            "localhost.evil.com:80",
            "[::1]:99999",
            "localhost:123456",
        ):
            assert get(url, "/api/snapshot", {"Host": host})[0] == 403, host


def test_the_hub_survives_a_failing_refresh_and_keeps_serving(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Any exception of one refresh (here a RecursionError, then a TypeError) is logged once per
    kind; the last good snapshot is still served and later rows still arrive."""
    import asyncio

    metrics = tmp_path / "run" / "peer-0" / "metrics.jsonl"
    write_rows(metrics, range(2))
    hub = fast_hub(tmp_path / "run")
    honest, failures = hub.runs.poll, [RecursionError("deep"), RecursionError("deep"), TypeError("odd"), RecursionError("deep")]

    def poll() -> bool:
        if hub.version > 0 and failures:
            raise failures.pop(0)
        return honest()

    hub.runs.poll = poll  # type: ignore[method-assign]

    async def main() -> None:
        task = asyncio.create_task(hub.run())
        for _ in range(200):
            await asyncio.sleep(0.02)
            if hub.version > 0:
                break
        good = hub.payload
        write_rows(metrics, range(2, 4))
        for _ in range(200):
            await asyncio.sleep(0.02)
            if json.loads(hub.payload)["progress"][0]["rounds_done"] == 4:
                break
        assert not task.done() and good != b"{}"
        task.cancel()

    with caplog.at_level("WARNING", logger="genrl_swarm.dashboard.hub"):
        asyncio.run(main())
    assert json.loads(hub.payload)["progress"][0]["rounds_done"] == 4 and not failures
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and "RecursionError" in warned[0] and "TypeError" in warned[1], warned
