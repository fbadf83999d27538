"""Our marl-eval JSON goes through marl-eval's pipeline beside Mava's (issue 33): the same
environment, task and metric names, ``elapsed_time`` from 0, and runs named as Mava's are.

Mava's file is written by marl-eval's own ``JsonLogger``, called as Mava's ``JsonLogger`` calls
it (environment ``LevelBasedForaging``, ``ff_ippo``, key ``mean_episode_return``, one value per
evaluation). marl-eval is installed without its dependencies (the Makefile); ``neptune`` is
imported by its ``json_tools`` package only to download runs, which is not done here."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from genrl_swarm.paradigms.marl.logs import METRIC, MarlEvalLog, episode_returns
from genrl_swarm.paradigms.marl.report import eval_curves, for_marl_eval

marl_eval = pytest.importorskip("marl_eval")
from marl_eval.utils.data_processing_utils import create_matrices_for_rliable, data_process_pipeline  # noqa: E402

ENV, TASK = "LevelBasedForaging", "2s-8x8-2p-2f-coop"
EVALS = 3


@pytest.fixture
def json_tools(monkeypatch: pytest.MonkeyPatch) -> Any:
    if "neptune" not in sys.modules:
        monkeypatch.setitem(sys.modules, "neptune", types.ModuleType("neptune"))
    from marl_eval import json_tools

    return json_tools


def write_mava(json_tools: Any, directory: Path, seed: int) -> None:
    """What Mava's JsonLogger leaves for one seed: EVALS evaluations, then the absolute metric."""
    logger = json_tools.JsonLogger(str(directory / f"seed_{seed}"), "ff_ippo", TASK, ENV, seed)
    for k in range(EVALS):
        logger.write(16 * 128 * (k + 1), METRIC, 0.2 * (k + 1) + 0.01 * seed, k, False)
    logger.write(16 * 128 * EVALS, METRIC, 0.7 + 0.01 * seed, EVALS, True)


def write_ours(run_dir: Path, seed: int) -> MarlEvalLog:
    """One peer's file as MarlLearner writes it (jumanji's env id, our system name)."""
    log = MarlEvalLog(run_dir / "marl_eval" / f"ippo_seed_{seed}.json", "LevelBasedForaging-v0", TASK, "ippo", seed)
    for k in range(EVALS):
        log.record(16 * 128 * (k + 1), [0.1 * (k + 1), 0.3 * (k + 1)])
    log.record_absolute([0.5, 0.7, 0.9])
    return log


def test_our_file_has_mavas_names_and_starts_the_clock_at_the_first_evaluation(tmp_path: Path) -> None:
    log = write_ours(tmp_path, 42000)
    doc = json.loads(log.path.read_text())
    run = doc[ENV][TASK]["ff_ippo"]["seed_42000"]
    assert sorted(run) == sorted([*(f"step_{k}" for k in range(EVALS)), "absolute_metrics"])
    assert run["step_0"]["elapsed_time"] == 0.0 <= run["step_1"]["elapsed_time"] <= run["step_2"]["elapsed_time"]
    assert run["step_1"] == {
        "step_count": 4096,
        "elapsed_time": run["step_1"]["elapsed_time"],
        METRIC: [pytest.approx(0.4)],
        "episode_returns": [0.2, pytest.approx(0.6)],
    }
    assert run["absolute_metrics"] == {METRIC: [pytest.approx(0.7)]}
    assert episode_returns(run["step_1"]) == [0.2, pytest.approx(0.6)]
    assert MarlEvalLog(tmp_path / "m.json", "RobotWarehouse-v0", "tiny-2ag", "mappo", 0).document() == {
        "RobotWarehouse": {"tiny-2ag": {"ff_mappo": {"seed_0": {}}}}
    }


def test_ours_and_mavas_go_through_marl_evals_pipeline_together(tmp_path: Path, json_tools: Any) -> None:
    mava = tmp_path / "json"
    for seed in (0, 1):
        write_mava(json_tools, mava, seed)
    run_dir = tmp_path / "run"
    for seed in (42000, 42001):  # two peers of one swarm
        write_ours(run_dir, seed)
    (mava / "swarm").mkdir()
    (mava / "swarm" / "metrics.json").write_text(json.dumps(for_marl_eval(run_dir, "swarm_ff_ippo")))

    raw = json.loads(json.dumps(json_tools.concatenate_json_files(str(mava), str(tmp_path / "merged"))))
    assert sorted(raw[ENV][TASK]) == ["ff_ippo", "swarm_ff_ippo"]
    assert sorted(raw[ENV][TASK]["swarm_ff_ippo"]) == sorted(raw[ENV][TASK]["ff_ippo"]) == ["seed_0", "seed_1"]
    processed = data_process_pipeline(raw, [METRIC])
    assert "extra" in processed, "marl-eval's pipeline refused the data (it prints why and returns it raw)"
    assert processed["extra"]["algorithm_list"] == ["ff_ippo", "swarm_ff_ippo"]
    assert processed["extra"]["environment_list"] == {ENV.lower(): [TASK]}
    assert processed["extra"]["evaluation_interval"] == {ENV.lower(): 16 * 128}
    final, over_time = create_matrices_for_rliable(processed, ENV, [METRIC])
    assert f"mean_norm_{METRIC}" in final  # marl-eval's name for the normalised metric
    for algorithm in ("ff_ippo", "swarm_ff_ippo"):
        assert final[f"mean_norm_{METRIC}"][algorithm].shape == (2, 1)  # runs x tasks
        assert over_time[f"mean_norm_{METRIC}"][algorithm].shape == (2, 1, EVALS)  # runs x tasks x evaluations
    # Normalised together over both algorithms: our absolute 0.7 sits between Mava's 0.70 and 0.71 (global min-max).
    assert np.all(final[f"mean_norm_{METRIC}"]["swarm_ff_ippo"] <= final[f"mean_norm_{METRIC}"]["ff_ippo"][1, 0] + 1e-6)


def test_the_report_reads_ours_mavas_and_the_old_format(tmp_path: Path) -> None:
    write_ours(tmp_path, 7)
    (curve,) = eval_curves(tmp_path)
    assert curve.label == "ff_ippo seed_7" and curve.steps == [2048, 4096, 6144]
    assert curve.mean == pytest.approx([0.2, 0.4, 0.6]) and curve.std == pytest.approx([0.1, 0.2, 0.3])
    assert episode_returns({"step_count": 1, "elapsed_time": 0.0, METRIC: [0.4]}) == [0.4]  # Mava's: the mean only
    assert episode_returns({"step_count": 1, "return": [0.1, 0.3]}) == [0.1, 0.3]  # this project's files before
