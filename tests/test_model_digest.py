"""The model a peer commits to (issue 45.3, the model side): base and adapter digests, and the
adapter as bytes another peer loads onto its own copy of the base to check bodies with.

- the adapter digest is the tensors' (not a file's), changes with every update, and is the same
  for the same values in another peer; the shared base's is computed once and is every peer's;
- a receiver that loads a sender's adapter bytes checks the sender's bodies as the sender would
  (``lm.verify``), and its own adapter would not pass them;
- bytes that do not hash to the digest, do not fit the adapter, or are not safetensors are refused
  and change nothing.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
import peft  # noqa: F401 - LMPolicy builds its LoRA adapters with it; model_digest reads and writes them with it
import torch

from genrl_swarm.core import ActSeed, Task
from genrl_swarm.paradigms.lm.model_digest import adapter_bytes, adapter_slots, adapter_state, tensors_digest
from genrl_swarm.paradigms.lm.policy import LMPolicy
from genrl_swarm.paradigms.lm.verify import check_bodies

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
LORA = {"r": 4, "alpha": 8, "target_modules": ("q_proj", "v_proj", "gate_proj")}
SEED = ActSeed(bytes(range(16)), 2, "sender")


def peer(seed: int, **lora: object) -> LMPolicy:
    return LMPolicy("tiny-random", {"num_generations": 4, "max_new_tokens": 8, "temperature": 1.2}, lora={**LORA, **lora}, seed=seed)


def step(policy: LMPolicy, scale: float = 0.3) -> None:
    with torch.no_grad():
        for name, w in policy.model.named_parameters():
            if "lora_B" in name:
                w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(len(name))) * scale)


def test_digests_name_the_values_and_change_with_every_update() -> None:
    a, b = peer(1), peer(2)
    first = a.model_digest()
    assert first.base == b.model_digest().base and len(first.base) == 64  # one shared base
    assert first.adapter != b.model_digest().adapter  # other initialisations
    step(a)
    assert a.model_digest().adapter != first.adapter and a.model_digest().base == first.base
    b.model.load_state_dict(a.model.state_dict())
    assert b.model_digest() == a.model_digest()
    state = adapter_state(a.model)
    assert tensors_digest(dict(reversed(state.items()))) == tensors_digest(state)  # not the order listed


def test_a_full_model_is_named_by_its_weights() -> None:
    full = LMPolicy("tiny-random", lora={"r": 0}, seed=1)
    before = full.model_digest()
    assert before.adapter == ""
    with torch.no_grad():
        next(full.model.parameters()).add_(1e-3)
    assert full.model_digest().base != before.base


def test_a_receiver_checks_a_senders_bodies_with_the_senders_adapter() -> None:
    sender, receiver = peer(1), peer(2)
    step(sender)
    step(receiver, -0.3)
    sender.begin_round(SEED)
    bodies = sender.rollouts([Task.create(f"Calculate {i} + 2.").input(0) for i in range(16)])
    digest = sender.model_digest()
    model = receiver.sender_model(adapter_bytes(sender.model), digest.adapter)
    cfg = sender.sampling
    assert all(v.ok for v in check_bodies(model, bodies, SEED, cfg.temperature, cfg.top_p, sender.eos_ids))
    assert not any(v.ok for v in check_bodies(receiver.model, bodies, SEED, cfg.temperature, cfg.top_p, sender.eos_ids))
    assert receiver.model_digest().adapter != digest.adapter  # its own adapter is untouched


def test_each_loaded_adapter_is_written_into_the_live_parameters() -> None:
    """A receiver loads one sender's adapter after another into one scratch model, in place
    (``adapter_slots``): the model then computes with exactly the adapter last loaded."""
    receiver = peer(2)
    for seed, scale in ((1, 0.3), (3, -0.2)):
        sender = peer(seed)
        step(sender, scale)
        model = receiver.sender_model(adapter_bytes(sender.model), sender.model_digest().adapter)
        assert adapter_slots(model) is not None  # peft's tensors are the parameters: loads go in place
        assert tensors_digest(adapter_state(model)) == sender.model_digest().adapter
        x = torch.tensor([[3, 1, 4, 1, 5]])
        with torch.no_grad():
            torch.testing.assert_close(model.eval()(input_ids=x).logits, sender.model.eval()(input_ids=x).logits)


def test_bytes_that_are_not_the_committed_adapter_are_refused() -> None:
    sender, receiver = peer(1), peer(2)
    step(sender)
    blob, digest = adapter_bytes(sender.model), sender.model_digest().adapter
    model = receiver.sender_model(blob, digest)
    loaded = {k: v.clone() for k, v in adapter_state(model).items()}
    flipped = bytearray(blob)
    flipped[-3] ^= 0x40  # a bit of the last tensor's data
    bigger = peer(3, r=8)
    for bad, why in (
        (bytes(flipped), "do not hash"),
        (b"not safetensors", "not a safetensors"),
        (adapter_bytes(bigger.model), "do not hash"),
    ):
        with pytest.raises(ValueError, match=why):
            receiver.sender_model(bad, digest)
    with pytest.raises(ValueError, match="does not fit"):
        receiver.sender_model(adapter_bytes(bigger.model), bigger.model_digest().adapter)
    assert all(torch.equal(v, loaded[k]) for k, v in adapter_state(model).items())  # nothing changed


def test_a_senders_adapter_bytes_never_reach_the_safetensors_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way in (slots written in place, slots that must be copied into, a peft model without
    slots) loads through our reader; the library's loaders raise if anything calls them."""
    import safetensors.torch

    from genrl_swarm.paradigms.lm import model_digest

    model = peer(4).model
    tensors = {k: torch.randn_like(v) for k, v in model_digest.adapter_state(model).items()}
    blob, digest = safetensors.torch.save(tensors), model_digest.tensors_digest(tensors)

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the safetensors library read a sender's bytes")

    monkeypatch.setattr(safetensors.torch, "load", refuse)
    monkeypatch.setattr(safetensors.torch, "safe_open", refuse, raising=False)
    slots = model_digest.adapter_slots(model)
    assert slots is not None
    strided = {k: torch.zeros(v.shape[::-1], dtype=v.dtype).t() if v.dim() == 2 else torch.zeros_like(v) for k, v in slots.items()}
    for target, into in ((model, slots), (None, strided), (model, None)):
        model_digest.load_adapter(target, blob, digest, into)
    got = model_digest.adapter_state(model)
    assert all(torch.equal(got[k], v) and torch.equal(strided[k], v) for k, v in tensors.items())
