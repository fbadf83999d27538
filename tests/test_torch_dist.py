"""Real gloo process groups on 127.0.0.1: full games, a dead rank, a hung rank, and a hostile
rank 1 (tests/helpers.dist.py) that corrupts, lies about lengths or forges its sender."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
from genrl_swarm.comm.torch_dist import layout
from genrl_swarm.run.metrics import read_metrics

pytestmark = pytest.mark.slow  # torchrun ranks over gloo

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
    return [subprocess.Popen(cmd, env=rank_env(r, world, port), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]


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
        f"game.exchange_timeout={timeout}", "policy._target_=helpers.dist.SlowPolicy", "+policy.delay=0.2",
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


def _hostile_game(tmp_path: Path, backend: str, *extra: str) -> list[tuple[int, str]]:
    args = ["--recipe", "bandit", f"run.dir={tmp_path}", "game.max_rounds=2", "game.exchange_timeout=20",
            "communication=torch", f"communication._target_=helpers.dist.{backend}", *extra, *QUIET]  # fmt: skip
    return finish(launch(3, args))


def assert_rank1_dropped_every_stage(tmp_path: Path, results: list[tuple[int, str]], *reasons: str) -> None:
    """The honest ranks finished every round without rank 1's payloads, counting and logging the drop."""
    for rank in (0, 2):
        code, err = results[rank]
        assert code == 0, err[-3000:]
        rows = read_metrics(tmp_path / f"rank-{rank}" / "metrics.jsonl")
        assert [r["round"] for r in rows] == [0, 1]
        assert all(r[f"swarm/peers_s{s}"] == 2 for r in rows for s in (0, 1)), rows
        assert rows[0].get("dropped/rank-1", 0) >= 1, rows[0]  # counted (later rounds may quarantine it)
        assert not any("reward/peer/rank-1" in r for r in rows)
        assert "dropped payload from rank-1" in err
        for reason in reasons:
            assert reason in err, err[-3000:]


def test_a_ranks_bad_payload_is_dropped_and_the_game_goes_on(tmp_path: Path) -> None:
    results = _hostile_game(tmp_path, "CorruptingBackend")
    assert_rank1_dropped_every_stage(tmp_path, results, "does not match its commitment")


def test_layout_drops_lengths_outside_the_cap_before_sizing_the_collective() -> None:
    plan = layout([10, 2**62, -5, 7, 11], cap=10)
    assert plan.width == 10  # the longest legal slot: 11 is over the cap
    assert sorted(plan.bad) == [1, 2, 4] and "outside 0..10" in plan.bad[1]
    assert layout([2**62, 2**62], cap=10).width == 0  # nothing legal: nothing allocated


def test_a_rank_announcing_a_huge_length_is_dropped_and_the_game_goes_on(tmp_path: Path) -> None:
    """Rank 1 announces 2**62 bytes in every phase. Honest ranks must not try to allocate it
    (before: every honest rank crashed in round 0 allocating it)."""
    results = _hostile_game(tmp_path, "LyingLengthBackend", "+communication.lie=huge")
    assert_rank1_dropped_every_stage(tmp_path, results, f"rank 1 (rank-1) announced {2**62} bytes, outside 0..")


def test_a_rank_whose_bytes_overrun_its_announced_length_is_dropped(tmp_path: Path) -> None:
    """Rank 1 sends more bytes than it announced and than any slot holds (before: rank 1 failed
    filling the collective's buffer, and the honest ranks stopped with a SwarmFailure)."""
    results = _hostile_game(tmp_path, "LyingLengthBackend", "+communication.lie=short")
    assert_rank1_dropped_every_stage(tmp_path, results, "rank 1 (rank-1) sent bytes past the")
    assert "its length arrived as" in results[1][1]  # the altered rank itself sees it, and goes on


@pytest.mark.parametrize(
    ("forge", "reason"),
    [("other-key", "signature does not verify"), ("other-id", "commitment is for ('genrl-swarm', 0, 0, 'rank-0')")],
)
def test_a_rank_forging_its_sender_is_dropped(tmp_path: Path, forge: str, reason: str) -> None:
    """Rank 1 signs with a key it did not announce at start, or names rank 0 as the sender."""
    results = _hostile_game(tmp_path, "ForgingBackend", f"+communication.forge={forge}")
    assert_rank1_dropped_every_stage(tmp_path, results, reason)


def test_a_rank_claiming_a_peer_id_it_does_not_own_stops_the_swarm_at_start(tmp_path: Path) -> None:
    """A libp2p-style peer id embeds its key; rank 1 claims one whose key it does not hold.
    With no key to check its records against, no rank starts (each says which rank to fix)."""
    results = _hostile_game(tmp_path, "ImpostorBackend")
    for code, err in results:
        assert code == 3, err[-3000:]
        assert "rank 1 has no usable identity" in err and "embeds another public key" in err


def test_rank_0_prints_the_swarms_table_and_the_other_ranks_none(tmp_path: Path) -> None:
    args = ["--recipe", "bandit", "communication=torch", f"run.dir={tmp_path}", "game.max_rounds=2", "run.tensorboard=false", "run.plot=false"]
    procs = launch(2, args)
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        assert p.returncode == 0, err[-2000:]
        outs.append(out)
    header = [line for line in outs[0].splitlines() if line.lstrip().startswith("round")]
    assert len(header) == 1 and "rank-0" in header[0] and "rank-1" in header[0], outs[0]  # one column per peer of the swarm
    assert sum(line.lstrip().startswith(("1/2", "2/2")) for line in outs[0].splitlines()) == 2
    assert not any(line.lstrip().startswith("round") for line in outs[1].splitlines()), outs[1]  # rank 1: no table
