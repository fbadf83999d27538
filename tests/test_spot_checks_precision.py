"""Honest peers whose draws are not exact fp32 are never proven wrong by each other (issue 45).

``lm.verify``'s tolerance holds fp32 matmuls on CPUs and GPUs alike (benchmarks/
bench_spot_checks_devices.py on an H200: 0 false alarms in 512 tiny-model and 32 SmolLM2 bodies
drawn on the GPU and checked on a CPU, and the other way round), not bf16 weights and not TF32
(there: a TF32 sender failed 112 of 512 checks on the tiny model and 32 of 32 on SmolLM2; bf16
peers failed every check of each other's bodies, on one machine). Such a peer commits no model
(nothing to check, so nothing to prove against it) and declines to check others.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
import peft  # noqa: F401
import torch

from genrl_swarm.core import ActSeed, Task
from genrl_swarm.core.interfaces import WorkCheck
from genrl_swarm.paradigms.lm.policy import LMPolicy

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SEED = ActSeed(bytes(range(16)), 3, "sender")
SAMPLING = {"num_generations": 4, "max_new_tokens": 8}
LORA = {"r": 4, "alpha": 8}


def peers(dtype: str) -> tuple[LMPolicy, LMPolicy]:
    return tuple(LMPolicy("tiny-random", SAMPLING, lora=LORA, device="cpu", dtype=dtype, seed=s) for s in (1, 2))  # type: ignore[return-value]


def proven(sender: LMPolicy, receiver: LMPolicy) -> int:
    """How many of ``sender``'s bodies ``receiver`` proves forged (0 when there is nothing to check)."""
    sender.begin_round(SEED)
    bodies = sender.rollouts([Task.create(f"Calculate {i} + {i % 5}.").input(0) for i in range(16)])
    committed = sender.committed_model()
    if committed is None:
        return 0
    checked = receiver.check_work(SEED, bodies, *committed)
    return sum(m is not None for m in checked.mismatches) if isinstance(checked, WorkCheck) else 0


@pytest.fixture
def high_precision_matmuls() -> Iterator[None]:
    """``torch.set_float32_matmul_precision("high")``: TF32 on a GPU, the common setting there."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def test_two_honest_bf16_peers_never_prove_each_other_wrong() -> None:
    sender, receiver = peers("bfloat16")
    assert proven(sender, receiver) == 0
    assert sender.committed_model() is None  # what bf16 draws are: not checkable


def test_a_peer_on_tf32_matmuls_commits_nothing_and_checks_no_one(high_precision_matmuls: None) -> None:
    sender, receiver = peers("float32")
    assert proven(sender, receiver) == 0
    assert sender.committed_model() is None
    torch.set_float32_matmul_precision("highest")
    sender.begin_round(SEED)
    sender.rollouts([Task.create("Calculate 1 + 1.").input(0)])
    committed = sender.committed_model()  # exact fp32 draws this round: checkable again
    assert committed is not None
    torch.set_float32_matmul_precision("high")
    assert isinstance(receiver.check_work(SEED, [], *committed), str)  # the receiver's own forward would not be exact


def test_exact_fp32_peers_still_commit_and_check() -> None:
    """The control: fp32 at the highest precision commits, and its bodies pass."""
    sender, receiver = peers("float32")
    assert proven(sender, receiver) == 0
    assert sender.committed_model() is not None
