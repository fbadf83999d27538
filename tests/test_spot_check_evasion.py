"""Spot checks a cheater cannot dodge, and that never frame an honest peer (issue 45, a hostile review).

- a payload padded with bodies admission never reads does not dilute the draw: only the bodies a
  receiver kept (the ones that train) are checked, so a cheater forging every kept body is caught;
- a committed top_p so small that every token is a near tie is not a pass: such settings are
  unchecked, and a check whose redone tokens are mostly near ties proves nothing either way;
- honest peers whose LoRA alpha differs (same rank and targets: the tensors fit) are not proven
  forged: the committed name carries alpha / r, and another scaling is "cannot check";
- an adapter over the size limit is "cannot check" at the receiver and committed by nobody, never
  a proof and never a crash;
- an accomplice's passed-on faults (throwaway ids, bytes nobody serves) neither crowd out an honest
  accuser's fault nor spend the time this peer's own checks need.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
import peft  # noqa: F401 - the adapter peers' LoRA layers
import torch

import test_verified_work as vw
from genrl_swarm.core import ActSeed, Body, ExchangeResult, GameState, Rollout, Task, TokenRollout, TokenSample
from genrl_swarm.core.interfaces import Fault, ModelClaim, WorkCheck
from genrl_swarm.core.spot_checks import SpotChecks
from genrl_swarm.paradigms.lm import packed as packing
from genrl_swarm.paradigms.lm import policy as lm_policy
from genrl_swarm.paradigms.lm.policy import LMPolicy

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SEED = ActSeed(bytes(range(16)), 2, "sender")
PADDING = 200  # cheap honest bodies for made-up inputs, after the forged ones


@pytest.fixture(autouse=True)
def _packed_tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packing, "MIN_WIDTH", 0)


class Padder(vw.Cheater):
    """Forges every body of its tasks, then pads its payload with honest one-token draws of its
    committed adapter for inputs nobody asked for (added at the wire: the game checks act's count)."""

    how = "no_model"
    padding: Sequence[TokenRollout] = ()

    def rollouts(self, inputs: Sequence[Any], greedy: bool = False) -> list[TokenRollout]:
        forged = super().rollouts(inputs, greedy)
        if not greedy and self.act_seed is not None:
            saved = self.sampling
            self.sampling = replace(saved, num_generations=1, max_new_tokens=1)
            try:
                self.padding = LMPolicy.rollouts(self, [Task.create(f"pad {i}").input(0) for i in range(PADDING)])
            finally:
                self.sampling = saved
        return forged


class PaddingBackend(vw.InMemoryBackend):
    """The cheater's transport: its padding signed into the payload after its bodies."""

    padder: Padder | None = None

    def exchange(self, round: int, stage: int, bodies: Sequence[Body], *args: Any, **kwargs: Any) -> Any:
        if self.peer_id == "cheater" and self.padder is not None:
            bodies = [*bodies, *self.padder.padding]
        return super().exchange(round, stage, bodies, *args, **kwargs)


def test_padding_a_payload_does_not_hide_forged_bodies_from_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a check drew among all 204 bodies of the payload, 4 of them forged (about 1 in 50)."""
    policies: dict[str, LMPolicy] = {p: vw.adapter_peer(i + 1, **k) for i, (p, k) in enumerate(vw.HONEST.items())}
    padder = Padder("tiny-random", dict(vw.SAMPLING), lora=vw.LORA, seed=7)
    policies["cheater"] = PaddingBackend.padder = padder
    monkeypatch.setattr(vw, "InMemoryBackend", PaddingBackend)
    games, _ = vw.play(policies, rounds=2)
    for peer in vw.HONEST:
        assert vw.forged(games[peer]) == {"cheater"}, (peer, games[peer].book.reasons)


def bodies_and_model(policy: LMPolicy, count: int = 8) -> tuple[list[TokenRollout], str, bytes]:
    policy.begin_round(SEED)
    bodies = policy.rollouts([Task.create(f"Calculate {i} + 3.").input(0) for i in range(count)])
    committed = policy.committed_model()
    assert committed is not None
    return bodies, *committed


def with_top_p(name: str, value: str) -> str:
    """``name`` with another committed top_p (its last field)."""
    return ":".join([*name.split(":")[:-1], value])


def test_a_top_p_that_makes_every_token_a_near_tie_is_never_a_pass() -> None:
    """Random tokens under a committed top_p of 1e-4: before, every token was skipped as a near
    tie and the body passed with nothing checked; the same bodies under the real top_p fail."""
    sender, receiver = vw.cheater("no_model"), vw.adapter_peer(2)
    bodies, name, blob = bodies_and_model(sender)
    real = receiver.check_work(SEED, bodies, name, blob)
    assert isinstance(real, WorkCheck) and all(m is not None for m in real.mismatches)
    for top_p in ("0.0001", "1e-300", "0.0004"):
        assert isinstance(receiver.check_work(SEED, bodies, with_top_p(name, top_p), blob), str)


def test_honest_peers_with_another_lora_alpha_are_not_proven_forged() -> None:
    """Same rank and targets, alpha 8 vs 16: the sender's tensors fit the receiver's adapter, so
    before, the receiver computed with its own scaling and proved every honest body forged."""
    sender = LMPolicy("tiny-random", dict(vw.SAMPLING), lora={**vw.LORA, "alpha": 16}, seed=1)
    receiver = vw.adapter_peer(2)  # alpha 8
    with torch.no_grad():
        for n, w in sender.model.named_parameters():
            if "lora_B" in n:
                w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(len(n))) * 0.3)
    bodies, name, blob = bodies_and_model(sender)
    checked = receiver.check_work(SEED, bodies, name, blob)
    assert isinstance(checked, str) and "scaling" in checked
    same = vw.adapter_peer(3)  # alpha 8 too: checkable, and honest
    own_bodies, own_name, own_blob = bodies_and_model(same)
    passed = receiver.check_work(SEED, own_bodies, own_name, own_blob)
    assert isinstance(passed, WorkCheck) and passed.mismatches == (None,) * len(own_bodies)


def test_an_adapter_over_the_size_limit_is_never_a_proof_nor_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    honest, receiver = vw.adapter_peer(1), vw.adapter_peer(2)
    bodies, name, blob = bodies_and_model(honest)
    monkeypatch.setattr(lm_policy, "MAX_MODEL_BYTES", len(blob) - 1)
    assert isinstance(receiver.check_work(SEED, bodies, name, blob), str)  # before: a mismatch per body, passed on
    assert honest.committed_model() is None  # the sender commits nothing a receiver will not load


# --------------------------------------------------------------------------- passed-on faults
CLAIM = ModelClaim("lm1:base:adapter:2.0:1.0:1.0", "00" * 32, 10)


def fault(accuser: str, accused: str) -> Fault:
    return Fault(accuser, accused, 0, 0, 0, CLAIM, b"e" * 16, "11" * 32, 100)


class StallingTransport:
    """What ``SpotChecks`` asks of a transport. The accomplice's faults name bytes nobody serves:
    fetching them waits out whatever time it is given (as an unanswered ask on HiveMind does); a
    fetch given no time gets nothing. A stub: stalling a real transport's fetch on purpose is what
    this cannot stage cheaply in memory."""

    def __init__(self) -> None:
        self.rechecked: list[str] = []
        self.fetch_timeouts: list[float] = []

    def faulted_work(self, f: Fault, body_type: type, timeout: float) -> str:
        self.rechecked.append(f.accused)
        if f.accuser == "accomplice":
            time.sleep(timeout)
        return "its payload could not be had"

    def settled_epoch(self) -> bytes:
        return b"e" * 16

    def fetch_model(self, round: int, sender: str, claim: ModelClaim, timeout: float) -> bytes | None:
        self.fetch_timeouts.append(timeout)
        return None if timeout <= 0 else b"x" * 10

    def accuse(self, *args: object) -> None:
        pass


class FailsEverything:
    body_type = TokenRollout

    def check_work(self, seed: ActSeed, bodies: Sequence[Body], name: str, blob: bytes, samples: object = None) -> WorkCheck:
        return WorkCheck(("not the committed model's draw",) * len(bodies), 1, 0)


def test_an_accomplices_faults_neither_crowd_out_an_honest_one_nor_starve_the_checks() -> None:
    """Eight faults against throwaway ids whose bytes nobody serves, then an honest accuser's:
    before, the eight took every re-check and the whole fetch time (the cheater's model fetched
    with 0 s left: unchecked, its bodies kept); now an accuser gets 2 re-checks and re-checks get
    half the time."""
    comm = StallingTransport()
    checks = SpotChecks("me", comm, FailsEverything())  # type: ignore[arg-type]
    cheat = TokenRollout("t", "d", (1,), (TokenSample((2,), (-0.1,), "length"),), 0, "tok")
    state = GameState(0, "me")
    state.rollouts.append(Rollout("cheater", 0, 0, cheat))
    received = {"cheater": (cheat,)}
    faults = (*(fault("accomplice", f"sybil-{i}") for i in range(8)), fault("honest-0", "cheater"))
    metrics = checks.run(state, 0, ExchangeResult(dict(received), models={"cheater": CLAIM}, faults=faults), dict(received), timeout=0.6)
    assert "cheater" in comm.rechecked and comm.rechecked.count("sybil-0") + comm.rechecked.count("sybil-1") == 2
    assert comm.fetch_timeouts and comm.fetch_timeouts[0] > 0.2
    assert metrics["checks/proven_s0"] == 1 and [d.peer_id for d in state.drops] == ["cheater"]
