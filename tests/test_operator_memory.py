"""Bounded memory over unlimited rounds: a peer keeps nothing per round it played.

10,000 rounds of the real loop (the bandit recipe, the launcher, every hook the CLI attaches),
measured with tracemalloc between round 2,000 and the last: Python allocations that are still
alive. RSS would be noise here (allocator arenas, a loaded machine); this is exact.

Tracing starts at round 2,000 itself, not before round 0: the warm-up rounds run at full speed
(tracemalloc makes a round ~2.5x slower), and the measure can only grow by it: what it counts is
every block allocated in the window and still alive at the end, where tracing from round 0 also
subtracted blocks of the warm-up that the window freed (~1 byte a round at 8,000 rounds before,
~11 after: the limit is 100).
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import pytest

from genrl_swarm import cli
from genrl_swarm.core.game import GameManager
from genrl_swarm.core.types import RoundResult
from genrl_swarm.run.launcher import RunSummary, build_managers, run_managers

pytestmark = pytest.mark.slow  # ten thousand rounds

ROUNDS, FROM = 10_000, 2_000
PER_ROUND_LIMIT = 100  # bytes retained per round; keeping each RoundResult costs about 2,000


def retained_per_round(bandit_recipe: object, rounds: int, keep_results: bool) -> float:
    """Bytes still allocated per round, from round ``FROM`` (warmed up) to the last."""
    recipe = bandit_recipe(f"game.max_rounds={rounds}", "game.mode=train", "swarm.num_peers=1", "run.checkpoint_every=0", "data.tasks_per_round=1")  # type: ignore[operator]
    managers, _ = build_managers(recipe)
    marks: dict[int, int] = {}

    def measure(manager: GameManager, result: RoundResult) -> None:
        if result.round == FROM:
            tracemalloc.start()
        if result.round in (FROM, rounds - 1):
            gc.collect()
            marks[result.round] = tracemalloc.get_traced_memory()[0]

    managers[0].hooks.after_round.append(measure)
    try:
        run_managers(managers, keep_results=keep_results)
    finally:
        tracemalloc.stop()
    return (marks[rounds - 1] - marks[FROM]) / (rounds - 1 - FROM)


def test_ten_thousand_rounds_retain_nothing_per_round(bandit_recipe: object) -> None:
    per_round = retained_per_round(bandit_recipe, ROUNDS, keep_results=False)
    assert per_round < PER_ROUND_LIMIT, f"{per_round:.0f} bytes retained per round"


def test_the_measure_sees_results_kept_per_round(bandit_recipe: object) -> None:
    """The same measure over fewer rounds catches a run that keeps its results (what every run
    did before), so the test above would fail if one crept back in."""
    assert retained_per_round(bandit_recipe, FROM + 1_000, keep_results=True) > 5 * PER_ROUND_LIMIT


def test_the_command_keeps_no_results(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, object] = {}

    def fake(cfg: object, resume: bool = False, stream: object = None, overwrite: bool = False, keep_results: bool = True) -> RunSummary:
        seen["keep_results"] = keep_results
        return RunSummary(tmp_path)

    monkeypatch.setattr("genrl_swarm.run.launcher.run_recipe", fake)
    assert cli.main(["run", "--recipe", "bandit", f"run.dir={tmp_path}"]) == 0
    assert seen == {"keep_results": False}
