"""The supervised warm-up (games/agent/warmup.py): synthetic episodes the environment plays and
scores 1, trained only on the model's tokens; and per-peer task mixes (AgentData.mixes)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # genrl_swarm.games.agent loads the LM stack

from genrl_swarm.envd.tasks import TASKS  # noqa: E402
from genrl_swarm.envd.types import TaskSpec  # noqa: E402
from genrl_swarm.games.agent.game import AgentData, load_tokenizer  # noqa: E402
from genrl_swarm.games.agent.heldout import heldout_seeds  # noqa: E402
from genrl_swarm.games.agent.warmup import HELDOUT_RESERVE, IGNORE, sft_batch, solution, synthetic_episode, train, warmup_seeds  # noqa: E402
from genrl_swarm.paradigms.agents.chat import ChatRenderer  # noqa: E402
from genrl_swarm.paradigms.agents.episodes import replay  # noqa: E402
from genrl_swarm.paradigms.agents.shared_env import shared_env  # noqa: E402

PREFILL = ('<tool_call>{"name": "calculate", "arguments": {"expression": "', "<answer>")


@pytest.fixture(scope="module")
def renderer() -> ChatRenderer:
    return ChatRenderer(load_tokenizer("tiny-random"))


@pytest.mark.parametrize("prefill", [(), PREFILL])
def test_synthetic_episode_solves_and_masks_only_model_tokens(renderer: ChatRenderer, prefill: tuple[str, ...]) -> None:
    env = shared_env("local")
    for kind in ("calculator-1", "calculator-2"):
        e = synthetic_episode(env, renderer, kind, 5, prefill)
        model = [t for t in e.turns if t.role == "assistant"]
        assert len(model) == 2 and all(t.token_ids[-1] == renderer.tokenizer.eos_token_id for t in model)  # each ends as a sampled turn
        texts = [renderer.reply_text(t.token_ids) for t in model]
        assert [(prefill[k] if prefill else "") + texts[k] for k in range(2)] == solution(kind, 5)  # the scaffold is not the model's
        mask = e.loss_mask
        assert sum(mask) == sum(len(t.token_ids) for t in model) and len(mask) == len(e.token_ids)
        if prefill:  # the scaffold's ids end the environment's turn, outside the mask
            opening = renderer.encode(prefill[0])
            first = e.turns[0].token_ids
            assert list(first[-len(opening) :]) == opening
        assert replay(e, TaskSpec(kind, 5, 2, 768), env, renderer, prefill).reward == 1.0  # a receiver scores it 1 too
    with pytest.raises(ValueError, match="scaffold"):
        synthetic_episode(env, renderer, "calculator-1", 5, ("<answer>",))
    with pytest.raises(ValueError, match="calculator levels only"):
        solution("sql", 1)


def test_sft_batch_labels_only_model_tokens(renderer: ChatRenderer) -> None:
    env = shared_env("local")
    episodes = [synthetic_episode(env, renderer, "calculator-1", s, PREFILL) for s in (1, 2, 3)]
    ids, attention, labels = sft_batch(episodes, pad_id=0)
    for row, e in enumerate(episodes):
        n = len(e.token_ids)
        assert ids[row, :n].tolist() == e.token_ids and attention[row].sum() == n
        want = [t if m else IGNORE for t, m in zip(e.token_ids, e.loss_mask)]
        assert labels[row, :n].tolist() == want and (labels[row, n:] == IGNORE).all()  # padding is never trained


def test_warmup_seeds_avoid_heldout_seeds_and_questions() -> None:
    for kind in ("calculator-1", "calculator-2"):
        seeds = warmup_seeds(kind, 64, 42)
        held = heldout_seeds(kind, HELDOUT_RESERVE, 42)
        assert len(set(seeds)) == 64 and not set(seeds) & set(held)
        task = TASKS[kind]
        assert not {task.setup(s, None).prompt for s in seeds} & {task.setup(s, None).prompt for s in held}
        assert heldout_seeds(kind, 32, 42) == held[:32]  # the benchmark's held-out tasks are a prefix of the reserve


@pytest.mark.slow
def test_train_lowers_the_loss_on_model_tokens_only() -> None:
    from transformers import AutoModelForCausalLM

    from genrl_swarm.paradigms.lm.models import resolve_model_path

    torch.manual_seed(0)
    renderer = ChatRenderer(load_tokenizer("tiny-random"))
    model = AutoModelForCausalLM.from_pretrained(str(resolve_model_path("tiny-random")))
    episodes = [synthetic_episode(shared_env("local"), renderer, "calculator-1", s, PREFILL) for s in range(4)]
    ids, attention, labels = sft_batch(episodes, 0)
    with torch.no_grad():
        before = float(model(input_ids=ids, attention_mask=attention, labels=labels).loss)
    losses = train(model, episodes, 0, epochs=10, batch=4, lr=1e-3)
    assert len(losses) == 10 and losses[-1] < before
    assert int((labels != IGNORE).sum()) == sum(sum(e.loss_mask) for e in episodes)  # only model tokens are targets


def test_mixes_give_each_peer_its_tasks_and_share_slot_zero() -> None:
    mixes = [["calculator-1", "calculator-2"], ["calculator-1", "calculator"]]
    peers = [AgentData(mixes=mixes, rank=r, tasks_per_round=2, group_size=4, seed=42) for r in range(3)]
    assert [p.kinds for p in peers] == [tuple(mixes[0]), tuple(mixes[1]), tuple(mixes[0])]  # rank modulo the mixes
    for r in range(3):
        a, b = peers[0].round_tasks(r), peers[1].round_tasks(r)
        assert [t.metadata["task"] for t in a] == ["calculator-1"] * 4 + ["calculator-2"] * 4
        assert [t.metadata["task"] for t in b] == ["calculator-1"] * 4 + ["calculator"] * 4
        assert [t.id for t in a[:4]] == [t.id for t in b[:4]]  # the same instance: the groups join
    with pytest.raises(ValueError, match="mixes"):
        AgentData(mixes=[["calculator-1"], []])
    with pytest.raises(ValueError, match="unknown"):
        AgentData(mixes=[["nope"]])


def test_demo_recipe_gives_the_two_peers_their_mixes() -> None:
    from genrl_swarm.config import instantiate, load_recipe, resolve

    cfg = load_recipe("agent/demo")
    kinds = [instantiate(resolve(cfg, rank)["data"], "data").kinds for rank in (0, 1)]
    assert kinds == [("calculator-1", "calculator-2"), ("calculator-1", "calculator")]
    assert resolve(cfg, 0)["data"]["prefill"] == ['<tool_call>{"name": "calculate", "arguments": {"expression": "', "<answer>"]
