"""Pre-filled call scaffolds are context, not model tokens: their ids sit in the turn before the
model's (loss mask 0), the sampled ids are the model's (mask 1) and their behaviour log-probs
match a fresh forward pass over the whole episode; the environment parses scaffold + reply, and
a receiver given the same public scaffold replays the episode."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from genrl_swarm.envd.tasks import TASKS
from genrl_swarm.games.agent import AgentData, agent_task
from genrl_swarm.paradigms.agents.episodes import Session, prefills, replay, task_spec
from genrl_swarm.paradigms.agents.policy import AgentPolicy
from genrl_swarm.paradigms.agents.shared_env import shared_env

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

SCAFFOLD = '<tool_call>{"name": "calculate", "arguments": {"expression": "'


@pytest.fixture(scope="module")
def policy() -> AgentPolicy:
    return AgentPolicy("tiny-random", {"max_new_tokens": 24}, seed=3, env=shared_env("local"))


def fresh_logps(model: torch.nn.Module, ids: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1).tolist()


def test_prefilled_ids_are_context_and_logprobs_are_exact(policy: AgentPolicy) -> None:
    tasks = [agent_task("calculator-1", seed, 0, 2, 800, (SCAFFOLD,)) for seed in (1, 2)]
    played = policy.play([t.input(0) for t in tasks])
    scaffold = policy.renderer.encode(SCAFFOLD)
    for p in played:
        e = p.episode
        first, reply = e.turns[0], e.turns[1]
        assert first.role == "user" and list(first.token_ids[-len(scaffold) :]) == scaffold  # the scaffold ends the prompt turn
        mask, at = e.loss_mask, len(first.token_ids)
        assert not any(mask[:at]) and all(mask[at : at + len(reply.token_ids)])  # scaffold 0, sampled 1
        logps = fresh_logps(policy.model, e.token_ids)
        assert list(reply.logprobs) == pytest.approx(logps[at - 1 : at - 1 + len(reply.token_ids)], abs=2e-3)
        assert replay(e, task_spec(tasks[0].metadata if p is played[0] else tasks[1].metadata), policy.env, policy.renderer, (SCAFFOLD,))


def test_the_environment_parses_scaffold_plus_reply(policy: AgentPolicy) -> None:
    seed = 4
    setup = TASKS["calculator-1"].setup(seed, None)
    expression = setup.prompt.split("What is ")[1].split("?")[0]
    t = agent_task("calculator-1", seed, 0, 3, 1000, (SCAFFOLD, "<answer>"))
    assert prefills(t.metadata) == (SCAFFOLD, "<answer>")
    s = Session.start(policy.env, task_spec(t.metadata), policy.renderer, prefills(t.metadata))
    for text in (f'{expression}"}}}}</tool_call>', f"{setup.truth}</answer>"):  # the model writes only the rest
        ids = [*policy.renderer.encode(text), policy.tokenizer.eos_token_id]
        s.turn(ids, [-0.5] * len(ids))
    assert (s.finish_reason, s.reward) == ("answer", 1.0)
    assert [t.role for t in s.conversation.turns] == ["user", "assistant", "tool", "assistant"]
    assert list(s.conversation.turns[2].token_ids[-len(policy.renderer.encode("<answer>")) :]) == policy.renderer.encode("<answer>")
    e = s.episode(t.id, t.input(0).digest, 0, policy.fingerprint)
    assert replay(e, task_spec(t.metadata), policy.env, policy.renderer, prefills(t.metadata)).reward == 1.0
    assert policy.check(e, t.input(0)) is None


def test_the_scaffold_is_public() -> None:
    data = AgentData(["calculator-1"], 1, 2, 2, 600, 1, 0, prefill=(SCAFFOLD,))
    plain = AgentData(["calculator-1"], 1, 2, 2, 600, 1, 0)
    with_, without = data.round_tasks(0)[0], plain.round_tasks(0)[0]
    assert prefills(with_.metadata) == (SCAFFOLD,) and prefills(without.metadata) == ()
    assert with_.input(0).digest != without.input(0).digest  # peers with other scaffolds do not mix episodes
