"""Verified work (issue 45.3-4, the exchange's side): real GameManagers of LM adapter peers on one
shared base, on the in-memory transport.

- each commitment names the model its bodies were drawn with (the base's and the adapter's
  digests, the sampling settings, the adapter bytes' sha256), and the adapter is served by that
  digest once revealed (and only then);
- a sender whose tokens come from another model, from another adapter than the one it committed,
  from a best-of-n pick or from no model at all is caught by the first spot check of its bodies
  (k = 1: it cheats on every body), dropped with all its bodies and quarantined at every honest
  peer;
- the proof travels: peers that check nothing themselves (k = 0) re-check the fault one honest
  peer passed on and quarantine the cheater too; a fault against an honest peer does not reproduce
  and frames nobody;
- honest peers on 1 or 2 threads, packed or unpacked kernels, training their adapters every round,
  are never flagged.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import msgspec
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
import peft  # noqa: F401 - the adapter peers' LoRA layers
import torch

from genrl_swarm.comm import InMemoryBackend, InMemorySwarm
from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core import DropKind, ExchangeResult, GameConfig, GameManager, GameState, Hooks, RewardManager, StageInput, Task, TokenRollout
from genrl_swarm.core.spot_checks import SpotChecks
from genrl_swarm.core.trust import TrustConfig
from genrl_swarm.core.types import Rollout
from genrl_swarm.data.digits import DigitArithmeticData
from genrl_swarm.paradigms.lm import packed as packing
from genrl_swarm.paradigms.lm.policy import LMPolicy

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
LORA = {"r": 4, "alpha": 8, "target_modules": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")}
SAMPLING = {"num_generations": 4, "max_new_tokens": 8, "temperature": 1.2}
#: The honest peers' kernels: 1 or 2 threads, packed or not (the tiny model packed: MIN_WIDTH 0).
HONEST = {"honest-0": {"threads": 1, "pack": True}, "honest-1": {"threads": 2, "pack": False}, "honest-2": {"threads": 2, "pack": True}}


#: Each peer's metrics rows of the last ``play``.
rows: dict[str, list[dict[str, float]]] = {}
#: Each peer's bodies marked verified, per stage of the last ``play``: (sender, whether the mark's body is a stored rollout's).
marks: dict[str, list[list[tuple[str, bool]]]] = {}


def record_marks(game: GameManager, state: GameState, stage: int, exchange: ExchangeResult) -> None:
    kept = {id(x.body) for x in state.rollouts if x.stage == stage}
    marks[game.peer_id].append([(v.peer_id, id(v.body) in kept) for v in state.verified if v.stage == stage])


class ByIndex(RewardManager):
    """Rewards that differ within every group, so a learner always has something to train on."""

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        return [float(i) for i in range(rollout.body.num_samples)]


def adapter_peer(seed: int, **sampling: object) -> LMPolicy:
    """An adapter peer whose adapter is its own (LoRA B drawn from ``seed``, not peft's zeros)."""
    policy = LMPolicy("tiny-random", {**SAMPLING, **sampling}, lora=LORA, seed=seed)
    with torch.no_grad():
        for name, w in policy.model.named_parameters():
            if "lora_B" in name:
                w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(seed * 1000 + len(name))) * 0.3)
    return policy


class Cheater(LMPolicy):
    """Commits its own adapter, sends bodies made otherwise (``how``)."""

    how = "honest"
    other: LMPolicy | None = None

    def rollouts(self, inputs: Sequence[StageInput], greedy: bool = False) -> list[TokenRollout]:
        seed = self.act_seed
        if greedy or seed is None:
            return super().rollouts(inputs, greedy)
        if self.how in ("another_model", "another_adapter"):
            assert self.other is not None
            self.other.begin_round(seed)
            return [msgspec.structs.replace(b, tokenizer=self.fingerprint) for b in self.other.rollouts(inputs)]
        if self.how == "best_of_n":  # each sample the longest of 4 drawn with private numbers
            drawn = []
            for private in range(4):
                self.act_seed = replace(seed, round=10_000 + private)
                drawn.append(super().rollouts(inputs))
            self.act_seed = seed
            fair = super().rollouts(inputs)
            return [
                msgspec.structs.replace(b, samples=tuple(sorted((s for d in drawn for s in d[k].samples), key=lambda s: -len(s.completion_ids))[:4]))
                for k, b in enumerate(fair)
            ]
        assert self.how == "no_model"  # plausible-looking tokens from no model: random ids, then EOS
        rng, out = random.Random(seed.round), []
        for body in super().rollouts(inputs):
            samples = []
            for s in body.samples:
                ids = (*(rng.randrange(self.vocab_size) for _ in range(rng.randint(2, 6))), self.eos_ids[0])
                samples.append(msgspec.structs.replace(s, completion_ids=ids, logprobs=(-1.0,) * len(ids), finish_reason="stop"))
            out.append(msgspec.structs.replace(body, samples=tuple(samples)))
        return out


def cheater(how: str) -> Cheater:
    policy = Cheater("tiny-random", dict(SAMPLING), lora=LORA, seed=7)
    with torch.no_grad():
        for name, w in policy.model.named_parameters():
            if "lora_B" in name:
                w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(7000 + len(name))) * 0.3)
    policy.how = how
    if how == "another_adapter":
        policy.other = adapter_peer(8)
    elif how == "another_model":  # a full model of its own, the base's weights moved
        policy.other = LMPolicy("tiny-random", dict(SAMPLING), lora={"r": 0}, seed=9)
        with torch.no_grad():
            for p in policy.other.model.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(9)) * 0.05)
    return policy


def play(
    policies: dict[str, LMPolicy],
    rounds: int = 2,
    checks: dict[str, int] | None = None,
    learn: bool = False,
    checkers: dict[str, type[SpotChecks]] | None = None,
    senders: dict[str, int] | None = None,
    samples: dict[str, int] | None = None,
) -> tuple[dict[str, GameManager], dict[str, list[ExchangeResult]]]:
    """Every peer's GameManager, run ``rounds`` rounds in threads; and what each exchange returned.
    ``checks``/``senders``/``samples``: a peer's ``trust.spot_checks`` / ``spot_check_senders`` / ``spot_check_samples``."""
    from genrl_swarm.paradigms.lm.learner import GRPOLearner

    swarm, coordinator = InMemorySwarm(), LocalCoordinator()
    games: dict[str, GameManager] = {}
    seen: dict[str, list[ExchangeResult]] = {p: [] for p in policies}
    rows.clear()
    rows.update({p: [] for p in policies})
    marks.clear()
    marks.update({p: [] for p in policies})
    for peer, policy in policies.items():
        hooks = Hooks(
            after_stage=[lambda g, state, s, ex: seen[g.peer_id].append(ex), record_marks],
            after_round=[lambda g, r: rows[g.peer_id].append(r.metrics)],
        )
        learner = GRPOLearner(policy, {"num_local": 4, "num_external": 4, "learning_rate": 1e-2}) if learn else None
        trust = TrustConfig(
            spot_checks=(checks or {}).get(peer, 1), spot_check_senders=(senders or {}).get(peer, 0), spot_check_samples=(samples or {}).get(peer, 0)
        )
        game = GameManager(
            DigitArithmeticData(tasks_per_round=4, eval_size=0, seed=3),
            ByIndex(),
            policy,
            learner,
            InMemoryBackend(swarm, peer),
            coordinator,
            GameConfig(max_rounds=rounds, exchange_timeout=60),
            hooks,
            trust=trust,
        )
        if checkers and peer in checkers:
            game.checks = checkers[peer](peer, game.comm, policy, trust.spot_checks)
        games[peer] = game
    errors: list[BaseException] = []

    def run(game: GameManager) -> None:
        try:
            game.run()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(g,)) for g in games.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors
    return games, seen


def forged(game: GameManager) -> set[str]:
    return {p for (p, kind) in game.book.drops if kind is DropKind.FORGED}


@pytest.fixture(autouse=True)
def _packed_tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packing, "MIN_WIDTH", 0)  # the tiny model takes the packed kernels too


@pytest.mark.parametrize("how", ["another_model", "another_adapter", "best_of_n", "no_model"])
def test_a_cheater_is_caught_by_the_first_check_and_quarantined_everywhere(how: str) -> None:
    policies: dict[str, LMPolicy] = {p: adapter_peer(i + 1, **kernels) for i, (p, kernels) in enumerate(HONEST.items())}
    policies["cheater"] = cheater(how)
    games, seen = play(policies, rounds=2, samples={"honest-2": 1})  # honest-2 redoes one sample of a body
    for peer in HONEST:
        game = games[peer]
        assert game.book.reasons.get("cheater", "").startswith("forged: spot check of body"), (peer, game.book.reasons)
        assert game.book.until["cheater"] >= 2  # quarantined from round 1 on
        assert forged(game) == {"cheater"} and set(game.book.reasons) == {"cheater"}  # no honest peer flagged
        (first, *_) = seen[peer]
        assert set(first.models) == {*HONEST, "cheater"} - {peer} or set(first.models) == {*HONEST, "cheater"}
        assert "cheater" not in seen[peer][1].received  # not read in round 1
        assert all(sender != "cheater" for stage in marks[peer] for sender, _ in stage)  # none of its bodies passed
    assert forged(games["cheater"]) == set()  # ... nor by the cheater's own honest checks


def test_the_proof_travels_and_a_false_one_frames_nobody() -> None:
    """honest-0 checks (k = 1); honest-1 and honest-2 check nothing themselves (k = 0) and learn of
    the cheater only from honest-0's fault, which each re-checks; a liar passes on faults against
    every honest body it gets, which nobody acts on."""

    class Liar(SpotChecks):
        def run(
            self, state: GameState, stage: int, exchange: ExchangeResult, received: dict[str, Any], timeout: float, skip: frozenset[str] = frozenset()
        ) -> dict[str, float]:
            for sender, claim in exchange.models.items():
                blob = self.comm.fetch_model(state.round, sender, claim, timeout)
                if sender != self.me and sender != "cheater" and blob is not None:
                    self.comm.accuse(state.round, stage, sender, 0, blob)
            return {}

    policies: dict[str, LMPolicy] = {p: adapter_peer(i + 1, **kernels) for i, (p, kernels) in enumerate(HONEST.items())}
    policies["liar"] = adapter_peer(5)
    policies["cheater"] = cheater("no_model")
    games, seen = play(policies, rounds=2, checks={"honest-1": 0, "honest-2": 0, "liar": 0}, checkers={"liar": Liar})
    assert games["honest-0"].book.reasons["cheater"].startswith("forged: spot check of body")
    for peer in ("honest-1", "honest-2"):
        why = games[peer].book.reasons.get("cheater", "")
        assert "passed on by honest-0, re-checked here" in why or "passed on by liar" not in why, why
        assert why.startswith("forged: spot check of body") and "re-checked here" in why, (peer, why)
        assert any(f.accused == "honest-0" and f.accuser == "liar" for ex in seen[peer] for f in ex.faults)  # the liar's, read
        assert forged(games[peer]) == {"cheater"}
    for game in games.values():
        assert not forged(game) & {*HONEST, "liar"}


def test_honest_adapter_peers_training_every_round_are_never_flagged() -> None:
    """Three honest adapter peers (1/2 threads, packed/unpacked) train every round: each round's
    commitments name a new adapter, every body checked passes."""
    policies: dict[str, LMPolicy] = {p: adapter_peer(i + 1, **kernels) for i, (p, kernels) in enumerate(HONEST.items())}
    games, seen = play(policies, rounds=3, learn=True, checks={"honest-1": 2}, senders={"honest-2": 1}, samples={"honest-0": 1})
    for peer, game in games.items():
        assert not game.book.reasons and not forged(game)
        names = [ex.models[other].name for ex in seen[peer] for other in ex.models if other != peer]
        assert len(names) == 6 and len(set(names)) == 6  # two senders x three rounds: a new adapter each round
        assert all(len(ex.received) == 3 for ex in seen[peer])
        assert all(row["checks/proven_s0"] == 0 and row["checks/unchecked_s0"] == 0 and row["checks/tokens_s0"] > 0 for row in rows[peer])
    checked = {peer: [row["checks/bodies_s0"] for row in rows[peer]] for peer in games}
    assert checked == {"honest-0": [2, 2, 2], "honest-1": [4, 4, 4], "honest-2": [1, 1, 1]}  # k per sender; one sender a stage
    # every body checked passed, and is marked verified in the round's state (a stored rollout's body)
    assert {peer: [len(stage) for stage in marks[peer]] for peer in games} == checked
    assert all(row["checks/verified_s0"] == row["checks/bodies_s0"] for peer in games for row in rows[peer])
    assert all(kept and sender != peer for peer in games for stage in marks[peer] for sender, kept in stage)


def test_the_adapter_is_served_by_its_digest_once_revealed() -> None:
    """The commitment names the adapter's sha256 and size; before the reveal nobody serves it, after
    it the sender does; bytes of another size are not taken."""
    swarm = InMemorySwarm()
    sender, receiver = InMemoryBackend(swarm, "sender"), InMemoryBackend(swarm, "receiver")
    policy = adapter_peer(1)
    model = policy.committed_model()
    assert model is not None and model[0].startswith("lm1:") and model[0].split(":")[2] == policy.model_digest().adapter
    sender.commit_model(model)
    got: dict[str, ExchangeResult] = {}
    before = receiver.fetch_model(0, "sender", claim_of(model), 1.0)
    threads = [threading.Thread(target=lambda b=b: got.__setitem__(b.peer_id, b.exchange(0, 0, [], 30))) for b in (sender, receiver)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    claim = got["receiver"].models["sender"]
    assert before is None and claim == claim_of(model) and "receiver" not in got["sender"].models  # it committed none
    assert receiver.fetch_model(0, "sender", claim, 1.0) == model[1]
    assert receiver.fetch_model(0, "sender", replace(claim, size=claim.size + 1), 1.0) is None


def claim_of(model: tuple[str, bytes]) -> Any:
    import hashlib

    from genrl_swarm.core.interfaces import ModelClaim

    return ModelClaim(model[0], hashlib.sha256(model[1]).hexdigest(), len(model[1]))
