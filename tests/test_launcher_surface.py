"""The launcher asks a transport only what ByteBackend declares (``rank``, ``announce()``,
``resume_at()``, ``peers_in_process()``, ``spawn()``), each with a default: a transport that writes
only its bytes runs, and one that declares more is heard."""

from __future__ import annotations

import io
from pathlib import Path

from genrl_swarm.config import load_recipe
from genrl_swarm.run.launcher import build_managers, run_managers, run_recipe

from helpers.transports import Declaring

QUIET = ["run.tensorboard=false", "run.console=false", "run.plot=false", "communication=none"]


def _run(tmp_path: Path, target: str, *overrides: str, resume: bool = False) -> str:
    stream = io.StringIO()
    recipe = load_recipe("bandit", [f"run.dir={tmp_path}", *QUIET, f"communication._target_={target}", *overrides])
    run_recipe(recipe, resume=resume, stream=stream)
    return stream.getvalue()


def test_a_transport_that_writes_only_its_bytes_runs_on_the_defaults(tmp_path: Path) -> None:
    out = _run(tmp_path, "helpers.transports.Minimal", "game.max_rounds=2", "swarm.num_peers=3")
    assert "is up" not in out  # nothing to announce
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == ["solo"]  # one peer: not in-process


def test_the_launcher_uses_the_rank_the_join_line_and_the_resume_point_a_transport_declares(tmp_path: Path) -> None:
    Declaring.resumed.clear()
    stream = io.StringIO()
    recipe = load_recipe("bandit", [f"run.dir={tmp_path}", *QUIET, "communication._target_=helpers.transports.Declaring", "game.max_rounds=2",
                                    "policy.num_generations=${peer.rank}"])  # fmt: skip
    managers, _ = build_managers(recipe, stream=stream)
    assert managers[0].policy.num_generations == 7  # ${peer.rank} is the transport's rank, not swarm.rank
    run_managers(managers, stream)
    assert "peer solo is up; others join with: --initial-peers /ip4/127.0.0.1/tcp/1/p2p/solo" in stream.getvalue()
    assert Declaring.resumed == []
    _run(tmp_path, "helpers.transports.Declaring", "game.max_rounds=3", "policy.num_generations=${peer.rank}", resume=True)
    assert Declaring.resumed == [2]  # resumed after the checkpoint of round 1
    rows = (tmp_path / "solo" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 3
