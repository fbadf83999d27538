"""Errors found before any work is one line with its documented status (issue 43.3): a model
that cannot load is found once, before any peer loads one (it used to show after every peer of
the process had tried, minutes in, as one traceback per peer), and an envd port in use is
named before any worker starts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from helpers.operator import CLI, DEMO, QUIET, python


def broken_model(tmp_path: Path) -> Path:
    """A directory that looks like a model and is not one: its config is not JSON."""
    model = tmp_path / "broken"
    model.mkdir()
    (model / "config.json").write_text("{not json")
    return model


@pytest.mark.slow  # four starts that import transformers
@pytest.mark.parametrize("model", ["missing", "broken"])
@pytest.mark.parametrize("module", [CLI, DEMO], ids=["run", "demo"])
def test_a_model_that_cannot_load_is_one_line_and_exit_2_before_any_peer_is_built(module: list[str], model: str, tmp_path: Path) -> None:
    pytest.importorskip("transformers")  # the model check reads configs and tokenizers
    path = tmp_path / "missing" if model == "missing" else broken_model(tmp_path)
    run = tmp_path / "run"
    given = ["run", "--recipe", "reasoning_gym/digits"] if module == CLI else []
    ended = python(module, [*given, f"policy.model={path}", f"run.dir={run}", *QUIET])
    line = ended.line()
    assert ended.status == 2 and line.startswith(f"genrl-swarm: model error: cannot load model '{path}': tried local directory {path}"), line
    assert not (run / "peer-0").exists()  # found before the first peer was built


def test_an_envd_port_in_use_is_one_line_and_exit_3() -> None:
    pytest.importorskip("grpc")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ended = python(CLI, ["envd", "--port", str(port)], timeout=60)
    line = ended.line()
    assert ended.status == 3 and line.startswith(f"genrl-swarm: envd: cannot listen on 127.0.0.1:{port}: Address already in use"), line
