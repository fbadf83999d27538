"""No silent no-ops (issue 43.5): settings under which a game would play without playing fail on
the first round, in one line naming the setting to change. An agent task whose prompt fills the
episode's token limit used to play episodes with no model turn, and the run exited 0 without a
word; an LM prompt plus its completion past the model's context is refused the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from genrl_swarm.core import Task
from genrl_swarm.core.limits import LimitError
from genrl_swarm.paradigms.lm.policy import LMPolicy

from helpers.operator import CLI, QUIET, python


@pytest.mark.slow  # LM episodes on the environment service
def test_an_agent_prompt_that_fills_the_token_limit_fails_the_first_round_naming_it(tmp_path: Path) -> None:
    pytest.importorskip("transformers")  # the tiny model's tokenizer and weights
    args = ["run", "--recipe", "agent", "policy.model=tiny-random", "data.max_tokens=40", "game.max_rounds=2", f"run.dir={tmp_path / 'run'}", *QUIET]
    ended = python(CLI, args)
    line = ended.line()
    assert ended.status == 2, ended.stderr[-3000:]
    assert line.startswith("genrl-swarm: recipe error: data.max_tokens=40 leaves no room for a model turn: the prompt of task"), line
    assert "raise data.max_tokens to at least" in line, line
    assert not (tmp_path / "run" / "peer-0" / "metrics.jsonl").exists()  # not one round counted as played


@pytest.mark.slow  # a tiny LM loaded and sampled
def test_an_lm_prompt_and_its_completion_past_the_models_context_is_refused_naming_the_setting() -> None:
    pytest.importorskip("transformers")
    policy = LMPolicy("tiny-random", {"max_new_tokens": 64, "num_generations": 1}, seed=0)
    context = policy.model.config.max_position_embeddings
    fits, long = Task.create("What is 2 + 2?").input(0), Task.create("one " * context).input(0)
    assert len(policy.rollouts([fits])) == 1
    with pytest.raises(
        LimitError, match=r"^policy.sampling.max_new_tokens=64 does not fit: the prompt of task \w+ takes \d+ tokens and the model reads at most"
    ):
        policy.rollouts([fits, long])
