"""Multi-turn GRPO on episodes: loss masks across turns, no gradient through tool tokens, groups
and per-task advantage normalisation, cross-policy sampling with the right behaviour log-probs.
A tiny Llama plays real envd sessions (in-process environment)."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import pytest

pytest.importorskip("torch")
import torch

transformers = pytest.importorskip("transformers")  # the tiny model's tokenizer and weights

from genrl_swarm.core import GameState, Rollout, RoundRewards, ScoredRollout, Task
from genrl_swarm.games.agent import agent_task
from genrl_swarm.paradigms.agents.bodies import Episode
from genrl_swarm.paradigms.agents.cross_policy import OWN, CrossPolicy
from genrl_swarm.paradigms.agents.episodes import Session, task_spec
from genrl_swarm.paradigms.agents.learner import AgentLearner, episode_sample, task_advantages
from genrl_swarm.paradigms.agents.policy import AgentPolicy
from genrl_swarm.paradigms.agents.shared_env import shared_env
from genrl_swarm.paradigms.lm.grpo_loss import grpo_loss

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]  # LM training
LIMITS = {"max_turns": 3, "max_tokens": 1000}  # the tiny tokenizer spends ~520 ids on a calculator prompt


@pytest.fixture(scope="module")
def policy() -> AgentPolicy:
    return AgentPolicy("tiny-random", {"max_new_tokens": 12}, seed=1, env=shared_env("local"))


def task(kind: str, seed: int, copy: int = 0) -> Task:
    return agent_task(kind, seed, copy, LIMITS["max_turns"], LIMITS["max_tokens"])


def scripted(policy: AgentPolicy, t: Task, replies: Sequence[str], logprob: float = -1.0) -> Episode:
    """An episode whose model turns say ``replies`` (each ended by EOS), in the real environment."""
    s = Session.start(policy.env, task_spec(t.metadata), policy.renderer)
    for text in replies:
        if s.done:
            break
        ids = [*policy.renderer.encode(text), policy.tokenizer.eos_token_id]
        s.turn(ids, [logprob] * len(ids))
    s.stop()
    inp = t.input(0)
    return s.episode(t.id, inp.digest, 0, policy.fingerprint)


CALL = '<tool_call>{"name": "calculate", "arguments": {"expression": "2 + 3"}}</tool_call>'
REPLIES = (CALL, '<tool_call>{"name": "calculate", "arguments": {"expression": "7 * 6"}}</tool_call>', "<answer>42</answer>")


# --------------------------------------------------------------------------- masks
def test_loss_mask_marks_exactly_the_model_tokens_of_every_turn(policy: AgentPolicy) -> None:
    ep = scripted(policy, task("calculator", 3), REPLIES)
    assert [t.role for t in ep.turns] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    eos = policy.tokenizer.eos_token_id
    model_ids = [i for text in REPLIES for i in (*policy.renderer.encode(text), eos)]
    masked = [i for i, m in zip(ep.token_ids, ep.loss_mask) if m]
    assert masked == model_ids  # every model token, each turn's EOS included, nothing else
    assert sum(ep.loss_mask) == len(model_ids) and len(ep.loss_mask) == len(ep.token_ids)
    # The ids the environment added follow the chat template: one turn end each, tool turns, next prompt.
    text = policy.tokenizer.decode(ep.token_ids)
    assert text.count("<|im_start|>tool") == 2 and text.count("<|im_end|>") == text.count("<|im_start|>")
    assert "<|im_end|><|im_end|>" not in text and "<|im_end|>\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n" in text
    # The learner's batch keeps the holes: its mask covers the same ids.
    learner = AgentLearner(policy, {"micro_batch_size": 2})
    sample = episode_sample(ep, 1.0)
    assert sample is not None
    batch = learner.collate([sample])
    tail = batch.input_ids[0, -batch.width :]
    assert tail[batch.completion_mask[0].bool()].tolist() == model_ids
    assert batch.completion_mask.sum() == len(model_ids) < batch.width


def test_tool_tokens_carry_no_gradient(policy: AgentPolicy) -> None:
    ep = scripted(policy, task("calculator", 4), REPLIES)
    learner = AgentLearner(policy)
    sample = episode_sample(ep, 1.0)
    assert sample is not None
    batch = learner.collate([sample])
    logp = learner.token_logps(policy.model, batch)
    logp.retain_grad()
    loss, _ = grpo_loss(logp, logp.detach(), batch.advantages, batch.completion_mask)
    loss.backward()
    grad, mask = logp.grad[0], batch.completion_mask[0].bool()
    policy.model.zero_grad(set_to_none=True)
    assert torch.all(grad[~mask] == 0) and (~mask).sum() > 20  # the tool results: no gradient at all
    assert torch.all(grad[mask] != 0)  # every model token gets one


def test_training_moves_the_weights_through_model_tokens_only(policy: AgentPolicy) -> None:
    """A full AgentLearner.train step on two groups: the loss counts model tokens only."""
    tasks = [task("calculator", 5, c) for c in range(2)]
    state = GameState(0, "me", {t.id: t for t in tasks}, {0: {t.id: t.input(0) for t in tasks}})
    episodes = [scripted(policy, tasks[0], REPLIES), scripted(policy, tasks[1], (CALL, "<answer>5</answer>"))]
    scored = tuple(ScoredRollout(Rollout("me", 0, 0, e), (r,)) for e, r in zip(episodes, (0.0, 1.0)))
    saved = copy.deepcopy(policy.model.state_dict())
    try:
        learner = AgentLearner(policy, {"learning_rate": 1e-3, "micro_batch_size": 1})
        metrics = learner.train(state, RoundRewards(0, scored))
        moved = any(not torch.equal(saved[k], v) for k, v in policy.model.state_dict().items())
    finally:
        policy.model.load_state_dict(saved)
    assert metrics["train/sequences"] == 2 and metrics["agent/calculator/reward"] == 0.5 and moved


# --------------------------------------------------------------------------- advantages
def test_per_task_advantage_normalisation_by_hand() -> None:
    # calculator: groups A [1, 0] and B [1, 1]; sql: groups C [0.2, 0.0], D [0.6, 0.2]; interleaved.
    rewards = [1.0, 0.2, 0.0, 0.6, 1.0, 0.0, 1.0, 0.2]
    groups = ["A", "C", "A", "D", "B", "C", "B", "D"]
    kinds = ["calc", "sql", "calc", "sql", "calc", "sql", "calc", "sql"]
    calc_std, sql_std = 0.1875**0.5, 0.0475**0.5  # population std of [1, 0, 1, 1] and of [0.2, 0, 0.6, 0.2]
    got = task_advantages(rewards, groups, kinds, "task")
    want = [0.5 / (calc_std + 1e-4), 0.1 / (sql_std + 1e-4), -0.5 / (calc_std + 1e-4), 0.2 / (sql_std + 1e-4), 0.0,
            -0.1 / (sql_std + 1e-4), 0.0, -0.2 / (sql_std + 1e-4)]  # fmt: skip
    assert got == pytest.approx(want, abs=1e-5)
    assert got[0] == pytest.approx(1.15443, abs=1e-4) and got[3] == pytest.approx(0.91722, abs=1e-4)
    # One std for the whole mix (batch) gives other values: the sql advantages would shrink.
    batch = task_advantages(rewards, groups, kinds, "batch")
    assert batch[3] < got[3] - 0.3
    assert task_advantages(rewards, groups, kinds, "none")[:2] == pytest.approx([0.5, 0.1])


def test_groups_are_task_instances_across_copies_and_peers(policy: AgentPolicy) -> None:
    calc = [task("calculator", 6, c) for c in range(2)]
    other = task("calculator", 7)
    tasks = [*calc, other]
    state = GameState(0, "me", {t.id: t for t in tasks}, {0: {t.id: t.input(0) for t in tasks}})
    ep = {t.id: scripted(policy, t, (CALL,)) for t in tasks}
    rows = [("me", calc[0], 1.0), ("me", calc[1], 0.0), ("peer", calc[0], 0.5), ("me", other, 1.0), ("peer", other, 1.0)]
    scored = [ScoredRollout(Rollout(p, 0, 0, ep[t.id]), (r,)) for p, t, r in rows]
    learner = AgentLearner(policy, {"num_external": 8}, normalize="none")
    samples = learner.samples(state, learner.select(state, RoundRewards(0, tuple(scored))))
    # seed 6 (two copies here, one at the peer) is one group of mean 0.5; seed 7 scored alike: no signal.
    assert sorted(s.advantage for s in samples) == pytest.approx([-0.5, 0.0, 0.5])


# --------------------------------------------------------------------------- cross-policy sampling
def fresh_logps(model: torch.nn.Module, ids: list[int]) -> list[float]:
    """log p(ids[k] | ids[:k]) for k >= 1 by one forward pass (temperature 1)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1).tolist()


def test_cross_policy_uses_both_policies_and_records_each_ones_logprobs(policy: AgentPolicy) -> None:
    other = AgentPolicy.__new__(AgentPolicy)
    other.__dict__ |= policy.__dict__ | {"model": copy.deepcopy(policy.model), "seed": 9}
    with torch.no_grad():
        for p in other.model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)) * 0.05)
    kept = policy.cross
    inputs = [task("sql", 11, c).input(0) for c in range(3)]
    try:
        policy.cross = CrossPolicy(policy, {"other": other}, probability=0.5, enabled=True, seed=0)
        played = policy.play(inputs)
    finally:
        policy.cross = kept
    used = [s for p in played for s in p.sources]
    assert set(used) == {OWN, "other"}
    models = {OWN: policy.model, "other": other.model}
    differs = 0
    for p in played:
        ids, at = p.episode.token_ids, 0
        logps = {name: fresh_logps(m, ids) for name, m in models.items()}
        turns = iter(p.sources)
        for t in p.episode.turns:
            if t.role == "assistant":
                name = next(turns)
                mine = logps[name][at - 1 : at - 1 + len(t.token_ids)]
                assert list(t.logprobs) == pytest.approx(mine, abs=2e-3)
                theirs = logps[OWN if name != OWN else "other"][at - 1 : at - 1 + len(t.token_ids)]
                differs += max(abs(a - b) for a, b in zip(t.logprobs, theirs)) > 0.05
            at += len(t.token_ids)
    assert differs > 0  # the two policies are really different


def test_cross_policy_is_off_by_default(policy: AgentPolicy) -> None:
    assert not policy.cross.enabled
    played = policy.play([task("sql", 12).input(0)])
    assert {s for p in played for s in p.sources} == {OWN} and all(len(p.sources) >= 2 for p in played)
