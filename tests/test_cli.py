"""The console command and scripts/train.sh, as a user runs them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from genrl_swarm.cli import main
from genrl_swarm.config import describe
from genrl_swarm.run.launcher import RunSummary

ROOT = Path(__file__).parents[1]
EXE = shutil.which("genrl-swarm", path=str(Path(sys.executable).parent))
TRAIN_SH = ROOT / "scripts" / "train.sh"


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Replace the launcher: record what the CLI would run instead of starting peers."""
    calls: list[dict[str, Any]] = []

    def fake(cfg: Any, resume: bool = False, stream: Any = None, overwrite: bool = False, keep_results: bool = True) -> RunSummary:
        calls.append({"cfg": cfg, "resume": resume, "stream": stream, "overwrite": overwrite, "keep_results": keep_results})
        return RunSummary(Path("runs/x"), standings={"peer-0": 1.0})

    monkeypatch.setattr("genrl_swarm.run.launcher.run_recipe", fake)
    return calls


@pytest.mark.skipif(EXE is None, reason="package not installed in this environment")
def test_help() -> None:
    out = subprocess.run([EXE, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and all(c in out.stdout for c in ("run", "swarm", "validate", "games", "chain"))


@pytest.mark.skipif(EXE is None, reason="package not installed in this environment")
def test_demo_game_prints_each_peer_per_round(tmp_path: Path) -> None:
    cmd = [EXE, "run", "--recipe", "bandit", "game.max_rounds=3", f"run.dir={tmp_path}", "run.tensorboard=false"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.strip().startswith(("1/", "2/", "3/"))]
    assert len(rows) == 3 and all(len(row) == 1 + 3 + 4 for row in rows)  # round, 3 peers, winner, dropped, quarantined, time
    assert "cumulative reward: peer-0=" in out.stdout
    assert (tmp_path / "peer-2" / "metrics.jsonl").is_file()


def test_games_lists_each_recipe_with_its_description(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["games"]) == 0
    out = capsys.readouterr().out
    games = ROOT / "src" / "genrl_swarm" / "games"
    for game in ("bandit", "multistage_math", "reasoning_gym"):
        assert f"\n{game}\n" in f"\n{out}"
    for recipe in ("bandit/recipe.yaml", "multistage_math/msm_dapodata_grpo.yaml", "reasoning_gym/recipe.yaml"):
        name, description = recipe.split("/")[1], describe(games / recipe)
        assert description and any(line.split(None, 1) == [name, description] for line in out.splitlines())


def test_missing_recipe_lists_the_recipes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--recipe", "multistage_math/nope.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("genrl-swarm: recipe error: no recipe 'multistage_math/nope.yaml'") and "\n" not in err
    assert "multistage_math/msm_dapodata_grpo.yaml" in err


def test_bad_recipe_stops_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str], launched: list[dict[str, Any]]) -> None:
    run_dir = tmp_path / "never"
    assert main(["run", "--recipe", "bandit", f"run.dir={run_dir}", "learner.lr=fast"]) == 2
    assert capsys.readouterr().err.strip() == "genrl-swarm: recipe error: learner.lr: expected float, got 'fast'"
    assert not run_dir.exists() and not launched


def test_run_hands_the_composed_recipe_to_the_launcher(launched: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--recipe", "bandit", "--resume", "communication=none", "game.max_rounds=2"]) == 0
    (call,) = launched
    assert call["resume"] is True and call["stream"] is None
    assert call["cfg"].communication._target_ == "genrl_swarm.comm.NullBackend" and call["cfg"].game.max_rounds == 2
    assert "cumulative reward: peer-0=1.00" in capsys.readouterr().out


def test_swarm_is_the_hivemind_group_plus_its_flags(launched: list[dict[str, Any]]) -> None:
    maddr, identity = "/ip4/127.0.0.1/tcp/4001/p2p/QmPeer", "/tmp/it's mine.key"
    argv = ["swarm", "--recipe", "bandit", "--initial-peers", maddr, "--identity", identity, "communication.min_peers=1"]
    assert main(argv) == 0
    cfg = launched[0]["cfg"]
    assert cfg.communication._target_ == "genrl_swarm.comm.hivemind.dht.HivemindBackend"
    assert list(cfg.communication.initial_peers) == [maddr] and cfg.communication.identity_path == identity
    assert cfg.communication.min_peers == 1 and cfg.swarm.num_peers == 1


@pytest.mark.parametrize(
    "override, message",
    [
        ("swarm.num_peers=0", "swarm.num_peers: must be >= 1, got 0"),
        ("game.max_rounds=-1", "game.max_rounds: must be >= 0, got -1"),
        ("data.tasks_per_round=20", "data: need 0 < tasks_per_round <= num_contexts, got 20 and 16"),
        ("game.train_every=epoch", "game.train_every: expected one of ['round', 'stage'], got 'epoch'"),
    ],
)
def test_validate_catches_what_a_run_would_hit(override: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--recipe", "bandit", override]) == 2
    assert capsys.readouterr().err.strip() == f"genrl-swarm: recipe error: {message}"


def test_validate_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--recipe", "bandit"]) == 0
    assert capsys.readouterr().out.strip() == "bandit: ok"


def _train_sh(tmp_path: Path, *args: str, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": python, "MASTER_PORT": "29599", "LOG_DIR": str(tmp_path / "logs")}
    return subprocess.run(["bash", str(TRAIN_SH), *args], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)


def test_train_sh_missing_recipe_lists_recipes_without_torchrun(tmp_path: Path) -> None:
    out = _train_sh(tmp_path, "1", "2", "multistage_math", "nope.yaml")
    assert out.returncode == 2
    assert out.stderr.strip().startswith("genrl-swarm: recipe error: no recipe 'multistage_math/nope.yaml'")
    assert "msm_dapodata_grpo.yaml" in out.stderr and "Traceback" not in out.stderr and "\n" not in out.stderr.strip()
    assert not (tmp_path / "logs").exists()  # torchrun never started


@pytest.mark.slow  # torchrun
def test_train_sh_checks_overrides_then_passes_the_torch_group(tmp_path: Path) -> None:
    bad = _train_sh(tmp_path, "1", "1", "bandit", "recipe.yaml", "learner.lr=hot")
    assert bad.returncode == 2 and bad.stderr.strip() == "genrl-swarm: recipe error: learner.lr: expected float, got 'hot'"
    record = tmp_path / "torchrun-args"
    fake = tmp_path / "python"  # a python that records the torchrun launch instead of starting it
    fake.write_text(f'#!/bin/sh\nif [ "$2" = torch.distributed.run ]; then echo "$@" > {record}; exit 0; fi\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    out = _train_sh(tmp_path, "1", "2", "multistage_math", "msm_dapodata_grpo.yaml", "game.max_rounds=1", python=str(fake))
    assert out.returncode == 0, out.stderr
    launched = record.read_text()
    assert "--nproc-per-node 2" in launched
    assert "run --recipe multistage_math/msm_dapodata_grpo.yaml communication=torch swarm.num_peers=1 game.max_rounds=1" in launched


# The strict check is of our code: the libraries below are read as Any (``follow_imports = skip``)
# instead of parsed whole. Following them parsed ~5,000 files of transformers, torch, ray and wandb
# and took 158-195 s of the suite; ``make lint`` (``mypy src``) still checks our calls into them.
_THIRD_PARTY_AS_ANY = "transformers torch ray wandb jax jaxlib peft gradio huggingface_hub opentelemetry mcp matplotlib trackio fastapi"
_STRICT_CONFIG = f"""[mypy]
python_version = 3.11
ignore_missing_imports = True
[mypy-{",".join(f"{name}.*" for name in _THIRD_PARTY_AS_ANY.split())}]
follow_imports = skip
[mypy-genrl_swarm.comm.torch_dist,genrl_swarm.run.loggers.trackio]
warn_unused_ignores = False
"""


@pytest.mark.slow  # mypy --strict over core, comm, protocol, run, config
@pytest.mark.timeout(900)  # ~20 s on a quiet machine; a checker is not timed, and memory pressure slowed it 20x
def test_core_type_checks_strict(tmp_path: Path) -> None:
    root = ROOT / "src" / "genrl_swarm"
    config = tmp_path / "mypy.ini"
    config.write_text(_STRICT_CONFIG)
    paths = (str(root / p) for p in ("core", "comm", "protocol", "run", "config.py"))
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "--strict", "--no-incremental", *paths],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout


@pytest.mark.parametrize(
    "override, message",
    [
        ("communication.max_bytes=0", "recipe error: communication: max_bytes must be positive"),
        ("game.exchange_timeout=inf", "recipe error: game.exchange_timeout: must be > 0 and finite, got inf"),
        ("run.dir=/proc/no/such/dir", "recipe error: run.dir: cannot create /proc/no/such/dir"),
        ("coordinator=evm", "coordinator error: no contract address"),
    ],
)
def test_run_time_configuration_errors_are_one_line(override: str, message: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENRL_SWARM_")}
    done = subprocess.run(
        [sys.executable, "-m", "genrl_swarm.cli", "run", "--recipe", "bandit", f"run.dir={tmp_path}", override, "game.max_rounds=1"],
        capture_output=True, text=True, timeout=120, env={**env, "GENRL_SWARM_CACHE": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode in (2, 4), done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if " INFO " not in line]
    assert len(errors) == 1 and message in errors[0], done.stderr[-2000:]
