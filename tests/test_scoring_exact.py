"""The scorers written here give what Reasoning Gym's own give, over thousands of generated
entries and the answer variants an honest model writes (and some it should not)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from genrl_swarm.scoring.registry import Audit
from genrl_swarm.scoring.rg import score_entry, where
from genrl_swarm.scoring.rg_exact import EXACT

reasoning_gym = pytest.importorskip("reasoning_gym")

PER_DATASET = 300


def variants(answer: str, rng: random.Random) -> Iterator[str | None]:
    """The oracle answer and what models write around it."""
    yield from (answer, f" {answer} ", answer.upper(), answer.lower(), answer.title(), f"{answer}.", f"The answer is {answer}")
    yield from ("", None, "0", "-1", "1/2", answer[:-1], answer + "0", answer.replace(" ", ""), answer.replace("\n", " "))
    yield str(rng.randint(-1000, 1000))
    if "/" in answer:
        top, bottom = answer.split("/", 1)
        yield from (f"\\frac{{{top}}}{{{bottom}}}", f"$\\dfrac{{ {top} }}{{ {bottom} }}$", f"{top} / {bottom}", f"{bottom}/{top}", f"{top}/1")
    rows = [r.split() for r in answer.split("\n")]
    if len(rows) > 1 and all(c.lstrip("-").isdigit() for r in rows for c in r):  # a matrix: as lists
        yield from (
            str([[int(c) for c in r] for r in rows]),
            str(tuple(tuple(int(c) for c in r) for r in rows)),
            "[" + ",".join("[" + ",".join(r) + "]" for r in rows) + ",]",
        )
        yield str([[int(c) + 1 for c in r] for r in rows])
    try:
        number = float(answer)
        yield from (f"{number:.2f}", f"{number:.6f}", f"{number + 0.001:.6f}", f"{number:e}", answer + "_0")
    except ValueError:
        pass


@pytest.mark.parametrize("dataset", sorted(EXACT))
def test_the_scorers_written_here_agree_with_reasoning_gyms(dataset: str) -> None:
    entries = reasoning_gym.create_dataset(dataset, size=PER_DATASET, seed=11)
    theirs = reasoning_gym.get_score_answer_fn(dataset)
    rng, checked = random.Random(0), 0
    for entry in entries:
        for answer in variants(entry["answer"], rng):
            assert score_entry(dataset, answer, entry, {}) == pytest.approx(theirs(answer=answer, entry=entry), abs=1e-12), (dataset, answer)
            checked += 1
    assert checked >= 10 * PER_DATASET


def test_binary_matrix_reads_lists_without_eval() -> None:
    entry = reasoning_gym.create_dataset("binary_matrix", size=1, seed=1)[0]
    assert score_entry("binary_matrix", '__import__("os").system("true")', entry, {}) == 0.0
    assert score_entry("binary_matrix", "[[1, 0]]" * 3, entry, {}) == 0.0


def test_decimal_arithmetic_scores_with_the_recipes_config() -> None:
    entry = {"answer": "1.23456", "metadata": {}}
    assert score_entry("decimal_arithmetic", "1.23", entry, {"max_num_decimal_places": 2}) == 1.0
    assert score_entry("decimal_arithmetic", "1.23", entry, {"max_num_decimal_places": 5}) == 0.0
    assert score_entry("decimal_arithmetic", "1e999", entry, {}) == 0.0


def test_every_sapo_dataset_is_scored_here_or_in_the_sandbox() -> None:
    from genrl_swarm.data.reasoning_gym import SAPO_DATASETS

    assert {d for d in SAPO_DATASETS if where(d) is Audit.OURS} == set(EXACT)
    assert where("propositional_logic") is Audit.SANDBOXED and where("spiral_matrix") is Audit.SANDBOXED


def completions(answer: str, rng: random.Random) -> Iterator[str]:
    """Whole completions around an answer: closed, unclosed, repeated, upper-case and bare tags,
    boxed, bold, phrases, trailing numbers."""
    for a in variants(answer, rng):
        a = a or ""
        yield from (f"<answer>{a}</answer>", f"Let me think.\n<answer>\n{a}\n</answer>", f"<answer>{a}", f"<ANSWER>{a}</ANSWER>", a)
        yield from (f"<answer>0</answer> no, <answer>{a}</answer>", f"<answer>{a}</answer><answer>1</answer>", f"\\boxed{{{a}}}", f"**{a}**")
        yield from (f"The answer is {a}", f"<answer> {a} </answer> 7", f"<answer><answer>{a}</answer></answer>")


#: The configs the test runs with: defaults, and one the recipe changed (the official scorer must use it too).
CONFIGS = {"decimal_arithmetic": {"min_num_decimal_places": 5, "max_num_decimal_places": 5, "precision": 9}}


@pytest.mark.parametrize(
    "dataset",
    [
        "arc_1d",
        "basic_arithmetic",
        "base_conversion",
        "bf",
        "binary_matrix",
        "calendar_arithmetic",
        "decimal_arithmetic",
        "fraction_simplification",
        "propositional_logic",
    ],
)
def test_the_evaluation_metric_is_reasoning_gyms_own(dataset: str) -> None:
    from reasoning_gym.utils import extract_answer

    from genrl_swarm.data.reasoning_gym import ReasoningGymData
    from genrl_swarm.rewards.reasoning import accuracy

    config = CONFIGS.get(dataset, {})
    official = reasoning_gym.create_dataset(dataset, size=1, seed=0, **config)
    data = ReasoningGymData([dataset], tasks_per_round=8, eval_size=0, seed=5, dataset_config={dataset: config} if config else None)
    rng, checked = random.Random(1), 0
    # propositional_logic is scored in the sandbox (a fork per completion, ~6 ms; ~25 ms on a loaded
    # machine): 2 rounds, 16 entries and 3,264 completions, still well over the 1,000 checked below.
    for round in range(2 if dataset == "propositional_logic" else 12):
        for task in data.round_tasks(round):
            entry = task.metadata["entry"]
            oracle = entry["answer"] if entry["answer"] is not None else entry["metadata"].get("example_answer", "")
            for text in completions(oracle, rng):
                want = official.score_answer(extract_answer(text), entry)
                assert accuracy(task, text) == pytest.approx(want, abs=1e-12), (dataset, text)
                checked += 1
    assert checked > 1000


def test_a_latex_fraction_is_read_whole_not_as_its_denominator() -> None:
    from genrl_swarm.core import Task
    from genrl_swarm.rewards.reasoning import lenient_accuracy

    task = Task.create("Simplify 6/8", answer="3/4")
    assert lenient_accuracy(task, "so it is \\frac{3}{4}") == 1.0
    assert lenient_accuracy(task, "<answer>\\dfrac{3}{4}</answer>") == 1.0
    assert lenient_accuracy(Task.create("2 - 1?", answer="1"), "4") == 0.0
