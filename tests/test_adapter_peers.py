"""Adapter peers (issue 45.1): LoRA on one frozen base per process, shared by every peer in it.

- two adapter peers hold the same base tensors (frozen) and adapters of their own;
- training one peer's adapters changes neither the base nor the other peer's outputs, and its
  optimizer holds the adapters alone;
- the lean sampler runs an adapter peer on the base's packing, packed once for all peers and
  never again when adapters train, and samples what the modules (peft) sample;
- a checkpoint holds the adapter and its optimizer, and restores them exactly;
- ``lora.shared_base=false`` and full fine-tuning still give a peer weights of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
import peft  # noqa: F401 - LMPolicy builds its LoRA adapters with it
import torch

from genrl_swarm.core import GameState, Rollout, RoundRewards, ScoredRollout, StageInput, Task, TokenRollout, TokenSample
from genrl_swarm.paradigms.lm import packed as packing
from genrl_swarm.paradigms.lm.learner import GRPOLearner
from genrl_swarm.paradigms.lm.policy import LMPolicy

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
LORA = {"r": 4, "alpha": 8, "target_modules": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")}
QUESTIONS = ("Calculate 1 + 2.", "Calculate 7 * 3.", "q")


def peer(seed: int, **lora: object) -> LMPolicy:
    return LMPolicy("tiny-random", {"num_generations": 2, "max_new_tokens": 6}, lora={**LORA, **lora}, seed=seed)


def split(policy: LMPolicy) -> tuple[dict[str, torch.nn.Parameter], dict[str, torch.nn.Parameter]]:
    """(base parameters, adapter parameters) by name."""
    named = dict(policy.model.named_parameters())
    return {n: p for n, p in named.items() if "lora_" not in n}, {n: p for n, p in named.items() if "lora_" in n}


@torch.no_grad()
def logits(policy: LMPolicy, text: str = "Calculate 2 + 2.") -> torch.Tensor:
    ids = torch.tensor([policy.prompt_ids(Task.create(text).input(0))])
    policy.model.eval()
    return policy.model(input_ids=ids).logits[0, -1]


def trained(policy: LMPolicy, amount: float = 0.3) -> None:
    """As if the learner had stepped the adapters: B away from zero."""
    with torch.no_grad():
        for name, w in split(policy)[1].items():
            if "lora_B" in name:
                w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(len(name))) * amount)


def test_adapter_peers_in_one_process_share_one_frozen_base() -> None:
    a, b = peer(1), peer(2)
    assert a.base is not None and a.base is b.base
    base_a, lora_a = split(a)
    base_b, lora_b = split(b)
    assert base_a.keys() == base_b.keys() and lora_a.keys() == lora_b.keys() and lora_a
    assert all(base_a[n] is base_b[n] and not base_a[n].requires_grad for n in base_a)  # one tensor, frozen
    assert all(lora_a[n] is not lora_b[n] and lora_a[n].requires_grad for n in lora_a)
    assert any(not torch.equal(lora_a[n], lora_b[n]) for n in lora_a if "lora_A" in n)  # each its own initialisation
    before = logits(b)
    trained(a)
    assert torch.equal(logits(b), before) and not torch.allclose(logits(a), before)


def handmade(policy: LMPolicy, inp: StageInput) -> TokenRollout:
    eos = policy.tokenizer.eos_token_id
    good, bad = TokenSample((40, 41, eos), (-1.0, -2.0, -0.5), "stop"), TokenSample((50, 51, 52), (-1.0,) * 3, "length")
    return TokenRollout(inp.task_id, inp.digest, tuple(policy.prompt_ids(inp)), (good, bad), 0, policy.fingerprint)


def train_once(policy: LMPolicy, learner: GRPOLearner) -> None:
    inp = Task.create("q").input(0)
    scored = ScoredRollout(Rollout("me", 0, 0, handmade(policy, inp), ()), (1.0, 0.0))
    learner.train(GameState(0, "me"), RoundRewards(0, (scored,)))
    policy.load_weights(learner.weights())


def test_training_one_peer_moves_its_adapters_only() -> None:
    a, b = peer(1), peer(2)
    base = {n: p.detach().clone() for n, p in split(a)[0].items()}
    adapters = {n: p.detach().clone() for n, p in split(a)[1].items()}
    before_b = logits(b)
    learner = GRPOLearner(a, {"learning_rate": 1e-2, "shared_prefix": False})
    assert {id(p) for group in learner.optimizer.param_groups for p in group["params"]} == {id(p) for p in split(a)[1].values()}
    train_once(a, learner)
    assert all(torch.equal(p, base[n]) for n, p in split(a)[0].items())
    assert any(not torch.equal(p, adapters[n]) for n, p in split(a)[1].items())
    assert torch.equal(logits(b), before_b)


@pytest.fixture
def pack_any_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny model is narrower than the packing threshold: packed anyway here."""
    monkeypatch.setattr(packing, "MIN_WIDTH", 0)


@pytest.mark.usefixtures("pack_any_width")
def test_adapter_peers_sample_on_one_packing_of_the_base() -> None:
    if not packing.available(torch.float32, torch.device("cpu")):
        pytest.skip("no oneDNN packing on this CPU")
    a, b = peer(1), peer(2)
    prompts = [a.prompt_ids(Task.create(q).input(0)) for q in QUESTIONS]
    assert a.base is not None
    trained(a)
    packs = a.base.packs.packs
    first = a.generate(prompts, 1, greedy=True).ids
    b.generate(prompts, 1, greedy=True)
    assert a.base.packs.packs == packs + (packs == 0)  # packed once, for both peers
    trained(a)  # a learner's step, in place: the adapters change, the base does not
    again = a.generate(prompts, 1, greedy=True).ids
    assert a.base.packs.packs == packs + (packs == 0)
    a.sampling.pack = False  # the modules (peft's LoRA layers)
    assert torch.equal(a.generate(prompts, 1, greedy=True).ids, again) and not torch.equal(again, first)


def test_an_adapter_checkpoint_holds_the_adapter_and_its_optimizer(tmp_path: Path) -> None:
    a = peer(1)
    learner = GRPOLearner(a, {"learning_rate": 1e-2, "shared_prefix": False})
    train_once(a, learner)
    a.save(tmp_path / "policy")
    learner.save(tmp_path / "learner")
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "policy" / "model" / "adapter_model.safetensors"))
    assert saved and all("lora_" in k for k in saved)  # no base weight in the checkpoint
    adapter_bytes = sum(p.numel() * p.element_size() for p in split(a)[1].values())
    assert (tmp_path / "learner" / "learner.pt").stat().st_size < 4 * adapter_bytes + 100_000  # two moments, not the base's
    again = peer(9)
    again_learner = GRPOLearner(again, {"learning_rate": 1e-2, "shared_prefix": False})
    again.load(tmp_path / "policy")
    again_learner.load(tmp_path / "learner")
    assert torch.equal(logits(again), logits(a))
    state = again_learner.optimizer.state_dict()["state"]
    assert state and all(torch.equal(v["exp_avg"], learner.optimizer.state_dict()["state"][k]["exp_avg"]) for k, v in state.items())


@pytest.mark.parametrize("lora", [{"r": 4, "shared_base": False}, {"r": 0}])
def test_a_peer_of_its_own_keeps_its_own_weights(lora: dict[str, object]) -> None:
    """``lora.shared_base=false`` (adapters on a private base) and full fine-tuning (``r=0``)."""
    a = LMPolicy("tiny-random", lora=lora, seed=1)
    b = LMPolicy("tiny-random", lora=lora, seed=2)
    assert a.base is None and b.base is None
    weight = lambda p: next(w for n, w in p.model.named_parameters() if "q_proj" in n and "lora_" not in n)  # noqa: E731
    assert weight(a) is not weight(b) and weight(a).data_ptr() != weight(b).data_ptr()
