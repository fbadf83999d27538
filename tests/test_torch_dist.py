"""Real gloo process groups on 127.0.0.1: full games, a dead rank, a hung rank, a corrupt rank."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from genrl_swarm.run.metrics import read_metrics

ROOT = Path(__file__).parents[1]
QUIET = ["run.tensorboard=false", "run.plot=false"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_env(rank: int, world: int, port: int) -> dict[str, str]:
    return {
        **os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
    }  # fmt: skip


def launch(world: int, args: list[str]) -> list[subprocess.Popen[str]]:
    port = free_port()
    cmd = [sys.executable, "-m", "genrl_swarm.cli", "run", *args]
    return [
        subprocess.Popen(cmd, env=rank_env(r, world, port), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(world)
    ]


def finish(procs: list[subprocess.Popen[str]], timeout: float = 240) -> list[tuple[int, str]]:
    out = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        out.append((p.returncode, err))
    return out


def assert_saw_everyone(run_dir: Path, world: int, rounds: int, stages: int) -> None:
    peers = [f"rank-{r}" for r in range(world)]
    for peer in peers:
        rows = read_metrics(run_dir / peer / "metrics.jsonl")
        assert [r["round"] for r in rows] == list(range(rounds))
        for row in rows:
            assert all(row[f"swarm/peers_s{s}"] == world for s in range(stages)), row
            assert sorted(k.rsplit("/", 1)[1] for k in row if k.startswith("reward/peer/")) == peers


def test_train_sh_runs_the_small_game_on_three_ranks(tmp_path: Path) -> None:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "LOG_DIR": str(tmp_path / "logs"), "PYTHON": sys.executable}
    cmd = [str(ROOT / "scripts" / "train.sh"), "1", "3", "bandit", "recipe.yaml", f"run.dir={tmp_path}", "game.max_rounds=3", *QUIET]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_saw_everyone(tmp_path, world=3, rounds=3, stages=2)
    assert list((tmp_path / "logs").rglob("stdout.log")), "torchrun wrote no per-rank log"


def test_llm_game_with_tiny_model_on_two_ranks(tmp_path: Path) -> None:
    args = [
        "--recipe", "reasoning_gym", f"run.dir={tmp_path}", "game.max_rounds=2", "game.mode=train",
        "policy.model=tiny-random", "policy.sampling.max_new_tokens=8", "policy.sampling.num_generations=2",
        "data.datasets=[basic_arithmetic]", "communication=torch", *QUIET,
    ]  # fmt: skip
    results = finish(launch(2, args))
    assert all(code == 0 for code, _ in results), results[0][1][-3000:]
    assert_saw_everyone(tmp_path, world=2, rounds=2, stages=1)


def _slow_game(tmp_path: Path, timeout: float) -> list[str]:
    return [
        "--recipe", "bandit", f"run.dir={tmp_path}", "game.max_rounds=50", "game.mode=train",
        f"game.exchange_timeout={timeout}", "policy._target_=dist_helpers.SlowPolicy", "+policy.delay=0.2",
        "communication=torch", *QUIET,
    ]  # fmt: skip


def _wait_for_round(path: Path, deadline: float = 120) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if path.is_file() and path.read_text().count("\n") >= 1:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never showed a finished round")


@pytest.mark.parametrize("how", ["killed", "hung"])
def test_a_dead_or_hung_rank_stops_the_others_with_a_clear_error(tmp_path: Path, how: str) -> None:
    timeout = 8.0
    procs = launch(3, _slow_game(tmp_path, timeout))
    victim = procs[2]
    try:
        _wait_for_round(tmp_path / "rank-2" / "metrics.jsonl")
        struck = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        survivors = finish(procs[:2], timeout=120)
        elapsed = time.monotonic() - struck
    finally:
        victim.kill()
        victim.communicate()
    for code, err in survivors:
        assert code == 3, err[-2000:]
        assert "swarm failure" in err and "a rank died or stopped answering" in err
    assert elapsed < timeout * 2 + 10  # the deadline of one exchange (plus one stage in flight), not a hang


def test_a_ranks_bad_payload_is_dropped_and_the_game_goes_on(tmp_path: Path) -> None:
    args = ["--recipe", "bandit", f"run.dir={tmp_path}", "game.max_rounds=2",
            "communication=torch", "communication._target_=dist_helpers.CorruptingBackend", *QUIET]  # fmt: skip
    results = finish(launch(3, args))
    assert all(code == 0 for code, _ in results), results[0][1][-2000:]
    for rank in (0, 2):
        rows = read_metrics(tmp_path / f"rank-{rank}" / "metrics.jsonl")
        assert [r["round"] for r in rows] == [0, 1]
        assert all(r["swarm/dropped_s0"] == 1 and r["swarm/peers_s0"] == 2 for r in rows)
        assert "reward/peer/rank-1" not in rows[0]
    assert "dropped payload from rank-1" in results[0][1]
