"""The calculator's curriculum (levels, promotion by moving success rate) and the shaped format
reward (a parsable call, a well-formed answer), reported apart from task success."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("torch")  # genrl_swarm.games.agent loads the LM stack

from genrl_swarm.envd.tasks import TASKS
from genrl_swarm.envd.tasks.arith import evaluate, show
from genrl_swarm.envd.tasks.curriculum import CALCULATOR_LEVELS, Curriculum, Promotion
from genrl_swarm.games.agent.shaping import Scored, Shaping, format_terms

CALL = '<tool_call>{"name": "calculate", "arguments": {"expression": "2 + 3"}}</tool_call>'


def expression(task: str, seed: int) -> str:
    return TASKS[task].setup(seed, None).prompt.split("What is ")[1].split("?")[0]


def test_levels_are_tasks_a_receiver_rebuilds() -> None:
    assert CALCULATOR_LEVELS[-1] == "calculator" and all(level in TASKS for level in CALCULATOR_LEVELS)
    for seed in range(20):
        one = expression("calculator-1", seed)
        assert re.fullmatch(r"\d{1,2} [-+*] \d{1,2}", one), one  # one binary operation
        assert len(re.findall(r"[-+*]", expression("calculator-2", seed))) == 2
        assert "(" in expression("calculator", seed)
        setup = TASKS["calculator-1"].setup(seed, None)
        assert setup == TASKS["calculator-1"].setup(seed, None) and setup.truth == show(evaluate(one))  # a pure function of the seed


def test_promotion_needs_a_full_window_at_the_threshold() -> None:
    c = Curriculum(rule=Promotion(window=4, threshold=0.5))
    assert not c.record("calculator-1", True)  # one lucky episode promotes no one
    assert not c.record("calculator-2", True)  # another level's episodes do not count
    assert [c.record("calculator-1", s) for s in (False, False)] == [False, False]  # 1 of 3: the window is not full
    assert c.record("calculator-1", True)  # 2 of the last 4: promoted
    assert (c.level, c.recent) == ("calculator-2", type(c.recent)())
    for _ in range(4):
        c.record("calculator-2", False)
    assert c.level == "calculator-2"  # 0 of 4: stays
    assert [c.record("calculator-2", True) for _ in range(2)] == [False, True]  # the moving window: F F T T
    assert c.level == "calculator"
    for _ in range(8):
        assert not c.record("calculator", True)  # the last level: nowhere to go
    with pytest.raises(ValueError, match="threshold"):
        Promotion(window=4, threshold=0.0)


def test_format_terms() -> None:
    tools = ["calculate"]
    assert format_terms([CALL, "<answer>5</answer>"], tools) == (1.0, 1.0)
    assert format_terms(["2 + 3 is 5, the answer is five"], tools) == (0.0, 0.0)  # prose
    assert format_terms(["<answer>7</answer>"], tools) == (0.0, 1.0)
    assert format_terms([CALL.replace("calculate", "search")], tools) == (0.0, 0.0)  # not one of the task's tools
    assert format_terms(['<tool_call>{"name": "calculate", "arguments": </tool_call>'], tools) == (0.0, 0.0)  # bad JSON


def test_shaped_reward_keeps_success_apart() -> None:
    weights = Shaping(call=0.1, answer=0.05)
    wrong = Scored("calculator-1", success=0.0, call=1.0, answer=1.0)
    assert wrong.reward(weights) == pytest.approx(0.15) and wrong.success == 0.0
    right = Scored("calculator-1", success=1.0, call=1.0, answer=1.0)
    assert right.reward(weights) > wrong.reward(weights) + 0.5  # a success outweighs any format credit
    assert Scored("calculator", 1.0, 1.0, 1.0).reward(Shaping()) == 1.0  # default: success alone
    with pytest.raises(ValueError, match="sum below 1"):
        Shaping(call=0.6, answer=0.5)


@pytest.mark.slow
def test_agent_reward_reports_success_and_format_apart() -> None:
    pytest.importorskip("transformers")
    from genrl_swarm.core import Rollout
    from genrl_swarm.games.agent import AgentReward, agent_task
    from genrl_swarm.games.agent.game import load_tokenizer
    from genrl_swarm.paradigms.agents.chat import ChatRenderer
    from genrl_swarm.paradigms.agents.episodes import Session, task_spec
    from genrl_swarm.paradigms.agents.shared_env import shared_env

    tokenizer = load_tokenizer("tiny-random")
    reward = AgentReward("tiny-random", env=shared_env("local"), renderer=ChatRenderer(tokenizer), shaping={"call": 0.1, "answer": 0.05})
    seed = 5
    truth = TASKS["calculator-1"].setup(seed, None).truth
    call = CALL.replace("2 + 3", expression("calculator-1", seed))
    for answer, success in ((truth, 1.0), (f"{truth}1", 0.0)):
        t = agent_task("calculator-1", seed, 0, 3, 1000)
        s = Session.start(reward.env, task_spec(t.metadata), reward.renderer)
        for text in (call, f"<answer>{answer}</answer>"):
            ids = [*reward.renderer.encode(text), tokenizer.eos_token_id]
            s.turn(ids, [-0.5] * len(ids))
        body = s.episode(t.id, t.input(0).digest, 0, "fp")
        got = reward.score(t, t.input(0), Rollout(peer_id="p", round=0, stage=0, body=body))
        assert got == [pytest.approx(success + 0.15)]
        assert reward.take_scored() == [Scored("calculator-1", success, 1.0, 1.0, "p", t.id)]  # success apart from format, and whose
