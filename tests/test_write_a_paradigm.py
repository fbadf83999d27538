"""docs/write-a-paradigm.md is a tutorial that works: its toy paradigm, built from exactly the
page's code blocks, plays in a swarm of two in-memory peers and learns.

Why: the page is the way in for anyone adding a paradigm, and its blocks import the package's
public names; when a name moves or an interface changes, this test fails instead of the reader.
Each block whose first line is ``# file: <path>`` is written to that path under ``tmp_path``.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from genrl_swarm.cli import main as cli_main
from genrl_swarm.core import Task

PAGE = Path(__file__).parents[1] / "docs" / "write-a-paradigm.md"
FILE_BLOCK = re.compile(r"^```\w+\n# file: (\S+)\n(.*?)^```", re.S | re.M)
#: What the toy game of the page hides, and where each peer's Gaussian starts.
SECRET, START = 7.3, 0.0


def page_files() -> dict[str, str]:
    """Path -> content of every ``# file:`` block of the page, the marker line included."""
    files: dict[str, str] = {}
    for path, body in FILE_BLOCK.findall(PAGE.read_text()):
        assert path not in files, f"two blocks write {path}"
        files[path] = f"# file: {path}\n{body}"
    return files


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The page's files written under ``tmp_path``, importable as ``toy`` and ``play_toy``."""
    for path, text in page_files().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in [m for m in sys.modules if m == "toy" or m.startswith("toy.") or m == "play_toy"]:
        del sys.modules[name]  # another test's tmp_path holds another copy


def test_the_page_has_every_file_of_the_toy() -> None:
    assert set(page_files()) == {
        "toy/bodies.py",
        "toy/policy.py",
        "toy/learner.py",
        "toy/game.py",
        "toy/__init__.py",
        "play_toy.py",
        "toy/recipe.yaml",
    }


def test_two_peers_learn_the_hidden_number(toy: Path) -> None:
    """Both peers' Gaussians end near the secret (they start 7.3 away), and each learned from the
    other's guesses: the exchange carried, decoded and accepted them."""
    play: Any = importlib.import_module("play_toy").play
    results = play(num_peers=2, rounds=12)
    assert sorted(results) == ["peer-0", "peer-1"]
    for peer, rounds in results.items():
        assert len(rounds) == 12
        means = [r.metrics["toy/mean"] for r in rounds]
        assert abs(means[-1] - SECRET) < 0.5, f"{peer} did not learn: its mean went {START} -> {means}"
        assert abs(means[0] - SECRET) > abs(means[-1] - SECRET)
        assert sum(r.metrics["toy/swarm_guesses"] for r in rounds) > 0, f"{peer} never learned from the other peer"
        refused = {k: v for k, v in rounds[-1].metrics.items() if k.startswith("trust/dropped_") and k != "trust/dropped_late"}
        assert not refused, f"{peer} refused an honest peer's bodies: {refused}"  # late (a loaded machine) is no refusal
        assert rounds[-1].rewards[peer] > rounds[0].rewards[peer]


def test_the_bounds_the_page_claims_hold_while_decoding(toy: Path) -> None:
    """Out-of-range, NaN and too many guesses fail while decoding; the policy refuses more guesses
    than the game draws."""
    from toy import GaussianPolicy, Guesses  # type: ignore[import-not-found]  # written by the fixture

    policy = GaussianPolicy(num_samples=4, seed=0)
    inp = Task.create("guess the hidden number").input(0)
    (body,) = policy.act([inp], 0)
    data = msgspec.msgpack.encode(body)
    assert msgspec.msgpack.decode(data, type=Guesses) == body and policy.check(body, inp) is None
    for values in ((float("nan"),), (101.0,), (0.0,) * 65, ()):
        forged = msgspec.msgpack.encode(msgspec.structs.replace(body, values=values))
        with pytest.raises(msgspec.ValidationError):
            msgspec.msgpack.decode(forged, type=Guesses)
    assert policy.check(msgspec.structs.replace(body, values=(1.0,) * 5), inp) is not None


def test_the_recipe_of_the_page_validates(toy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``genrl-swarm validate --recipe toy/recipe.yaml``: every ``_target_`` imports and every
    argument checks against the constructors' annotations; peer 0's components are built."""
    assert "PYTHONPATH=. genrl-swarm validate --recipe toy/recipe.yaml" in PAGE.read_text()
    code = cli_main(["validate", "--recipe", "toy/recipe.yaml"])
    assert code == 0, capsys.readouterr().err


def test_the_recipe_of_the_page_runs(toy: Path) -> None:
    """``genrl-swarm run --recipe toy/recipe.yaml``, in this process: every peer's metrics.jsonl
    has the learner's ``toy/mean`` near the secret and the greedy ``eval/reward``, as the page says."""
    from genrl_swarm.config import load_recipe
    from genrl_swarm.run.launcher import run_recipe

    assert "PYTHONPATH=. genrl-swarm run --recipe toy/recipe.yaml" in PAGE.read_text()
    summary = run_recipe(load_recipe("toy/recipe.yaml", ["run.console=false", "run.plot=false"]))
    assert sorted(summary.standings) == ["peer-0", "peer-1"]
    for peer in ("peer-0", "peer-1"):
        rows = [json.loads(line) for line in (toy / "runs" / "toy" / peer / "metrics.jsonl").read_text().splitlines()]
        assert len(rows) == 12 and abs(rows[-1]["toy/mean"] - SECRET) < 0.5 and rows[-1]["eval/reward"] > 0.9
