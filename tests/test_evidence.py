"""Issue 46's experiment harness (benchmarks/bench_evidence.py, docs/evidence.md): the exact
metric, the rows-matched draw, the analysis's numbers, and a run on the tiny model that resumes."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from genrl_swarm.core import ScoredRollout
from genrl_swarm.core.types import Rollout
from genrl_swarm.data.digits import make_task, problems
from genrl_swarm.rewards.reasoning import ReasoningReward, exact_accuracy, lenient_accuracy, stated_accuracy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_evidence as ev  # noqa: E402


@pytest.mark.parametrize(
    ("text", "lenient", "exact"),
    [
        ("2 - 1 is a mathematical operation", 1.0, 0.0),  # the echo the pilot's metric credited
        ("The answer is 1.", 1.0, 0.0),
        ("1", 1.0, 0.0),
        ("<answer>2 - 1</answer>", 1.0, 0.0),  # Reasoning Gym's partial credit pays this 0.2
        ("<answer>1.0</answer>", 1.0, 0.0),
        ("<answer>1", 1.0, 0.0),  # unclosed
        ("<answer>7</answer> <answer>1</answer>", 1.0, 1.0),  # the last closed block
        ("<answer> 1 </answer>", 1.0, 1.0),
        ("<answer>1</answer>", 1.0, 1.0),
    ],
)
def test_the_exact_metric_pays_only_the_tagged_answer(text: str, lenient: float, exact: float) -> None:
    task = make_task(2, "-", 1)
    assert (lenient_accuracy(task, text), exact_accuracy(task, text)) == (lenient, exact)


def test_the_lenient_metric_credits_an_echo_on_34_of_255_problems() -> None:
    """docs/evidence.md's count: an echo scores where the last operand is the answer."""
    echo = [(a, op, b) for a, op, b in problems() if lenient_accuracy(make_task(a, op, b), f"{a} {op} {b} is a mathematical operation")]
    assert len(echo) == 34 and len(problems()) == 255
    assert not any(exact_accuracy(make_task(a, op, b), f"{a} {op} {b} is a mathematical operation") for a, op, b in problems())


def test_the_reward_trains_on_the_exact_metric_when_asked() -> None:
    task = make_task(3, "*", 3)
    texts = ("9", "<answer>9</answer>", "<answer>3 * 3 = 9</answer>")
    assert [ReasoningReward()._reward(task, t) for t in texts] == [1.0, 1.0, 1.0]
    assert [ReasoningReward(answer_rule="exact")._reward(task, t) for t in texts] == [0.0, 1.0, 0.0]
    assert [ReasoningReward(answer_rule="exact", lenient_weight=0.5)._reward(task, t) for t in texts] == [0.5, 1.5, 0.5]
    assert [ReasoningReward(answer_rule="stated")._reward(task, t) for t in (*texts, "3 * 3 = 9")] == [1.0, 0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="answer_rule: 'exactly' is not one of lenient, exact, stated"):
        ReasoningReward(answer_rule="exactly")


@pytest.mark.parametrize(
    ("text", "stated"),
    [
        ("4 * 7 = 28", 1.0),  # SmolLM2's own answer form
        ("4*7 = 28.", 1.0),
        ("\n 28 \n\nThe answer is 28", 1.0),  # the first non-empty line decides
        ("4 * 7 = 28 is right", 0.0),  # anything after the number on that line
        ("7 * 4 = 28", 0.0),  # not the question's expression
        ("3 + 25 = 28", 0.0),
        ("The answer is 28.", 0.0),
        ("4 * 7 is a mathematical operation", 0.0),  # an echo
        ("4 * 7 = 24\n28", 0.0),  # a wrong first statement is not corrected by a later line
        ("<answer>28</answer>", 0.0),
        ("28.0", 0.0),
        ("", 0.0),
    ],
)
def test_the_stated_metric_pays_only_a_first_line_that_states_the_answer(text: str, stated: float) -> None:
    assert stated_accuracy(make_task(4, "*", 7), text) == stated


def test_no_echo_of_any_problem_earns_the_stated_metric() -> None:
    for a, op, b in problems():
        task = make_task(a, op, b)
        assert stated_accuracy(task, f"{a} {op} {b}") == 0.0 and stated_accuracy(task, f"{a} {op} {b} is a mathematical operation") == 0.0
        assert stated_accuracy(task, f"{a} {op} {b} = {task.answer}") == 1.0


def _group(rewards: tuple[float, ...], name: str = "g") -> ScoredRollout:
    return ScoredRollout(Rollout(name, 0, 0, None), rewards)


def test_the_rows_arm_takes_as_many_informative_groups_as_asked() -> None:
    groups = [_group((1.0, 0.0), "a"), _group((1.0, 1.0), "b"), _group((0.0, 1.0), "c"), _group((0.0, 0.0), "d"), _group((0.0, 0.5), "e")]
    chosen, short = ev.rows_select(groups, 2, random.Random(0))
    assert short == 0 and len(chosen) == 2 and all(ev.informative(g.rewards) for g in chosen)
    chosen, short = ev.rows_select(groups, 5, random.Random(0))
    assert short == 2 and sorted(g.rollout.peer_id for g in chosen) == ["a", "c", "e"]
    assert ev.rows_select(groups, 0, random.Random(0)) == ([], 0)


def test_the_analysis_reproduces_the_pilot_and_the_power_table() -> None:
    pytest.importorskip("scipy")
    pilot = [0.062, -0.014, 0.132, 0.062, 0.146, -0.028]
    p = ev.paired(pilot)
    assert (round(p.mean, 3), round(p.sd, 3), round(p.low, 3), round(p.high, 3), round(p.p, 3)) == (0.060, 0.072, -0.015, 0.135, 0.096)
    assert (p.ahead, p.behind) == (4, 2)
    p8 = ev.paired([*pilot, 0.049, -0.028])
    assert (round(p8.low, 3), round(p8.high, 3)) == (-0.009, 0.105)
    d = 0.060 / 0.0718
    assert ev.power(d, 13) < 0.8 < ev.power(d, 14)  # N = 14
    assert ev.power(0.0476 / 0.0681, 18) < 0.8 < ev.power(0.0476 / 0.0681, 19)
    assert round(ev.sign_test(12, 2), 4) == 0.0129 and round(ev.sign_test(11, 3), 4) == 0.0574 and ev.sign_test(0, 0) == 1.0
    # the verdict's MDE: 0.81 sd at n = 14
    spread = ev.paired([0.1 * (i % 2) - 0.05 + 0.0001 * i for i in range(14)])
    assert abs(spread.mde / spread.sd - 0.81) < 0.01


def test_a_half_written_last_line_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "arms.jsonl"
    path.write_text('{"seed": 100}\n{"seed": 10')
    assert ev.read_jsonl(path) == [{"seed": 100}]
    assert path.read_text() == '{"seed": 100}\n'
    ev.append_jsonl(path, {"seed": 101})
    assert [r["seed"] for r in ev.read_jsonl(path)] == [100, 101]


TINY = ["--model", "tiny-random", "--rounds", "1", "--every", "1", "--tasks", "2", "--generations", "4", "--eval-size", "9",
        "--max-new-tokens", "8", "--shaping", "1.0", "--seeds", "100"]  # fmt: skip


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_evidence.py"), *TINY, "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=1500, cwd=ROOT)  # fmt: skip


@pytest.mark.slow  # three tiny-model arms in child processes, then a resume
def test_a_seed_writes_its_lines_and_a_half_done_run_resumes(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    out = tmp_path / "ev"
    done = _run(out)
    assert done.returncode == 0, done.stderr[-3000:]
    arms = [json.loads(line) for line in (out / "arms.jsonl").read_text().splitlines()]
    seeds = [json.loads(line) for line in (out / "seeds.jsonl").read_text().splitlines()]
    assert [a["arm"] for a in arms] == list(ev.ARMS) and [s["seed"] for s in seeds] == [100]
    for a in arms:  # its own process: CPU and peak RSS of that arm
        assert a["cpu_s"] > 0 and 100 < a["peak_rss_mb"] < 8000 and a["curve"][0][0] == 0 and a["curve"][-1][0] == 1
        assert set(a["after"]) == set(ev.METRICS) and set(a["after"]["stated"]) == {"+", "-", "*", "all"}
    sharing, rows = arms[0]["train"], arms[2]["train"]
    for peer, counts in sharing["schedule"].items():  # arm C trained on arm A's counts, less the recorded shortfall
        assert all(c <= w for c, w in zip(rows["schedule"][peer], counts))
    assert sum(map(sum, sharing["schedule"].values())) - sum(map(sum, rows["schedule"].values())) == rows["shortfall"]
    assert "seed 100 done:" in done.stdout and "CPU" in done.stdout and "peak RSS" in done.stdout
    assert seeds[0]["diff"]["sharing-isolated"] == arms[0]["after"]["stated"]["all"] - arms[1]["after"]["stated"]["all"]
    assert all(a["metric"] == "stated" and a["code"] for a in arms)

    again = _run(out)  # everything done: nothing runs
    assert again.returncode == 0 and "seed 100: done before, kept" in again.stdout and ": stated" not in again.stdout
    assert len((out / "seeds.jsonl").read_text().splitlines()) == 1

    # half done: the seed line never written and the last arm cut mid-line
    (out / "seeds.jsonl").write_text("")
    lines = (out / "arms.jsonl").read_text().splitlines()
    (out / "arms.jsonl").write_text("\n".join(lines[:2]) + "\n" + lines[2][:40])
    resumed = _run(out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "seed 100 sharing: done before, kept" in resumed.stdout and "seed 100 isolated: done before, kept" in resumed.stdout
    assert "seed 100 isolated_rows: stated" in resumed.stdout and "half-written" in resumed.stdout
    arms2 = [json.loads(line) for line in (out / "arms.jsonl").read_text().splitlines()]
    assert [a["arm"] for a in arms2] == list(ev.ARMS) and arms2[:2] == arms[:2]
    for peer, counts in sharing["schedule"].items():  # the rerun arm replays the kept sharing arm's counts
        assert all(c <= w for c, w in zip(arms2[2]["train"]["schedule"][peer], counts))
    assert len((out / "seeds.jsonl").read_text().splitlines()) == 1

    other = _run(out, "--lr", "1e-4")  # other settings never mix into these records
    assert other.returncode == 2 and "other settings" in other.stderr
    analysis = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_evidence.py"), "--analyze", "--out", str(out)],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)  # fmt: skip
    assert analysis.returncode == 0 and "exploratory" in analysis.stdout and "primary: sharing - isolated" in analysis.stdout


def test_the_curves_plot_every_arm_of_every_seed(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib  # noqa: F401

    records = [
        {"seed": seed, "arm": arm, "metric": "stated", "curve": [[r, 0.3 + 0.01 * r, 0.4] for r in (0, 4, 8)]}
        for seed in (200, 201)
        for arm in ("sharing", "isolated")
    ]
    ev.plot_curves(records, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_failure_kinds_tell_another_operations_result_from_a_wrong_number_and_from_no_statement() -> None:
    tasks = [make_task(4, "*", 7)] * 5 + [make_task(9, "-", 2)]
    texts = ["4 * 7 = 28", "11", "4 * 7 = 11", "29", "4 * 7 is a product", "7"]
    kinds = ev.failure_kinds(tasks, texts)
    assert kinds["*"] == {"right": 1, "other_op": 2, "wrong": 1, "unstated": 1}
    assert kinds["-"] == {"right": 1, "other_op": 0, "wrong": 0, "unstated": 0}
    assert kinds["+"] == dict.fromkeys(ev.FAILURES, 0)
