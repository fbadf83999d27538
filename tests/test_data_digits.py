"""One-digit arithmetic data: the held-out split never reaches a round, draws are reproducible
from the swarm seed, and every answer is right."""

from __future__ import annotations

import pytest

from genrl_swarm.data.digits import DigitArithmeticData, problems, solve


def test_universe_is_every_one_digit_problem_without_negative_differences() -> None:
    every = problems()
    assert len(every) == len(set(every)) == 100 + 55 + 100
    assert all(a >= b for a, op, b in every if op == "-")
    assert len(problems(["*"])) == 100 and {op for _, op, _ in problems(["+", "-"])} == {"+", "-"}
    with pytest.raises(ValueError, match="subset"):
        problems(["/"])


def test_answers_are_the_arithmetic_results() -> None:
    data = DigitArithmeticData(tasks_per_round=8, eval_size=20, seed=1)
    for task in data.eval_tasks() + data.round_tasks(0) + data.round_tasks(1):
        a, op, b = task.prompt.removeprefix("What is ").removesuffix("?").split()
        assert task.answer == str(eval(f"{a}{op}{b}"))  # noqa: S307 - the test's own one-digit strings
        assert task.answer not in task.public.values()
    assert (solve(7, "-", 3), solve(7, "*", 3), solve(7, "+", 3)) == (4, 21, 10)


def test_held_out_problems_never_appear_in_any_round() -> None:
    data = DigitArithmeticData(tasks_per_round=16, eval_size=48, seed=5)
    held_out = {t.prompt for t in data.eval_tasks()}
    assert len(held_out) == 48
    served = {t.prompt for r in range(200) for t in data.round_tasks(r)}
    assert not held_out & served
    assert len(served) == 255 - 48  # 200 rounds of 16 reach every training problem


def test_rounds_are_a_function_of_seed_and_round_and_have_no_repeats() -> None:
    a, b = DigitArithmeticData(seed=3), DigitArithmeticData(seed=3)
    assert [t.id for t in a.round_tasks(4)] == [t.id for t in b.round_tasks(4)]
    assert [t.id for t in a.eval_tasks()] == [t.id for t in b.eval_tasks()]
    assert [t.id for t in a.round_tasks(4)] != [t.id for t in a.round_tasks(5)]
    assert {t.id for t in a.eval_tasks()} != {t.id for t in DigitArithmeticData(seed=4).eval_tasks()}
    many = DigitArithmeticData(tasks_per_round=200, eval_size=55).round_tasks(0)
    assert len({t.id for t in many}) == 200


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="eval_size"):
        DigitArithmeticData(tasks_per_round=10, eval_size=250)
    with pytest.raises(ValueError, match="tasks_per_round"):
        DigitArithmeticData(tasks_per_round=0)
