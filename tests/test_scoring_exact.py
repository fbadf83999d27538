"""The scorers written here give what Reasoning Gym's own give, over thousands of generated
entries and the answer variants an honest model writes (and some it should not)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from genrl_swarm.scoring.rg import score_entry, where
from genrl_swarm.scoring.registry import Audit
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
        yield from (str([[int(c) for c in r] for r in rows]), str(tuple(tuple(int(c) for c in r) for r in rows)), "[" + ",".join("[" + ",".join(r) + "]" for r in rows) + ",]")
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
