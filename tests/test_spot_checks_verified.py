"""What a spot check leaves behind (issue 45.4), on stub transports and policies (no model):

- a body whose check passed is marked verified in the round's state (``GameState.verified``), with
  its place in the payload and the samples redone; bodies not checked, checks that could not be
  made and checks that were mostly near ties mark nothing; a sender proven forged takes its marks
  with it, those of earlier stages too;
- no LM learner reads a swarm body's claimed log-probs, so a verified log-prob has nothing to replace
  (``lm.grpo_loss.behaviour_of``: a claim of any value gives one weight; tests/test_trust_v3_flood.py);
- the detection rate of a sender that cheats on m of its n kept bodies, checked k at a time without
  replacement: 1 - C(n - m, k) / C(n, k) a check (docs/paradigms/lm.md), measured over many
  rounds of the real picker.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest

from genrl_swarm.core import ActSeed, Body, ExchangeResult, GameState, Rollout, TokenRollout, TokenSample, Verified
from genrl_swarm.core.interfaces import ModelClaim, WorkCheck
from genrl_swarm.core.spot_checks import SpotChecks

CLAIM = ModelClaim("lm1:base:adapter:2.0:1.0:1.0", "00" * 32, 10)


class Transport:
    """What ``SpotChecks`` asks of a transport: every committed model's bytes served, unless ``serves`` is False."""

    def __init__(self, serves: bool = True) -> None:
        self.serves = serves
        self.accused: list[tuple[str, int]] = []

    def settled_epoch(self) -> bytes:
        return b"e" * 16

    def fetch_model(self, round: int, sender: str, claim: ModelClaim, timeout: float) -> bytes | None:
        return b"x" * 10 if self.serves else None

    def accuse(self, round: int, stage: int, sender: str, body: int, blob: bytes) -> None:
        self.accused.append((sender, body))


class Checker:
    """A policy whose check fails exactly the ``forged`` bodies (by identity); ``ties``: near ties per token checked."""

    body_type = TokenRollout

    def __init__(self, forged: Sequence[Body] = (), ties: float = 0.1) -> None:
        self.forged = {id(b) for b in forged}
        self.ties = ties
        self.samples: list[Sequence[Sequence[int]] | None] = []

    def check_work(self, seed: ActSeed, bodies: Sequence[Body], name: str, blob: bytes, samples: Sequence[Sequence[int]] | None = None) -> WorkCheck:
        self.samples.append(samples)
        tokens = 10 * len(bodies)
        return WorkCheck(tuple("not its draw" if id(b) in self.forged else None for b in bodies), tokens, round(self.ties * tokens))


def body(task: str, samples: int = 4) -> TokenRollout:
    return TokenRollout(task, "d" * 64, (1, 2), tuple(TokenSample((3, 4), (-0.5, -0.5), "length") for _ in range(samples)), 0, "tok")


def received(senders: dict[str, int]) -> dict[str, tuple[Body, ...]]:
    """``count`` fresh bodies of each sender."""
    return {s: tuple(body(f"{s}-{i}") for i in range(n)) for s, n in senders.items()}


def admitted(got: dict[str, tuple[Body, ...]], stage: int = 0, state: GameState | None = None) -> GameState:
    """``state`` (a new one by default) with every body of ``got`` stored at ``stage`` (what admission keeps)."""
    state = state or GameState(0, "me")
    state.rollouts += [Rollout(s, 0, stage, b) for s, bodies in got.items() for b in bodies]
    return state


def check(checks: SpotChecks, state: GameState, got: dict[str, tuple[Body, ...]], stage: int = 0) -> dict[str, float]:
    exchange = ExchangeResult(dict(got), models=dict.fromkeys(got, CLAIM))
    return checks.run(state, stage, exchange, dict(got), timeout=5.0)


def test_a_body_that_passed_is_marked_verified_and_only_it() -> None:
    got = received({"a": 5, "b": 3})
    state = admitted(got)
    checks = SpotChecks("me", Transport(), Checker(), per_sender=2)  # type: ignore[arg-type]
    metrics = check(checks, state, got)
    assert sorted((v.peer_id, v.stage) for v in state.verified) == [("a", 0), ("a", 0), ("b", 0), ("b", 0)]
    for v in state.verified:
        assert v.body is got[v.peer_id][v.index] and v.samples is None  # every sample redone
    marked = [x for x in state.rollouts if state.is_verified(x)]
    assert len(marked) == 4 and {id(x.body) for x in marked} == {id(v.body) for v in state.verified}
    assert metrics["checks/verified_s0"] == 4 and metrics["checks/bodies_s0"] == 4 and metrics["checks/proven_s0"] == 0


def test_the_samples_redone_are_recorded() -> None:
    got = received({"a": 3})
    state, policy = admitted(got), Checker()
    check(SpotChecks("me", Transport(), policy, per_sender=1, samples=2), state, got)  # type: ignore[arg-type]
    (mark,) = state.verified
    assert policy.samples == [[list(mark.samples or ())]] and len(mark.samples or ()) == 2


@pytest.mark.parametrize("why", ["bytes not served", "mostly near ties"])
def test_a_check_that_could_not_decide_marks_nothing(why: str) -> None:
    got = received({"a": 3})
    state = admitted(got)
    transport, policy = (Transport(serves=False), Checker()) if why == "bytes not served" else (Transport(), Checker(ties=2.0))
    metrics = check(SpotChecks("me", transport, policy, per_sender=3), state, got)  # type: ignore[arg-type]
    assert state.verified == [] and metrics["checks/unchecked_s0"] == 1 and metrics["checks/verified_s0"] == 0


def test_a_sender_proven_forged_takes_its_marks_with_it() -> None:
    """Stage 0 passes both senders' checked bodies; stage 1 proves "a" forged: its stage-0 marks
    go with its bodies, "b"'s stay."""
    first = received({"a": 2, "b": 2})
    state = admitted(first)
    check(SpotChecks("me", Transport(), Checker(), per_sender=2), state, first)  # type: ignore[arg-type]
    assert len(state.verified) == 4
    second = received({"a": 2, "b": 2})
    admitted(second, stage=1, state=state)
    transport = Transport()
    check(SpotChecks("me", transport, Checker(forged=second["a"][:1]), per_sender=2), state, second, stage=1)  # type: ignore[arg-type]
    assert transport.accused == [("a", 0)]
    assert {v.peer_id for v in state.verified} == {"b"} and len(state.verified) == 4  # b's two stages
    assert not any(x.peer_id == "a" for x in state.rollouts)


def caught_share(bodies: int, cheats: int, k: int, rounds: int, seed: int) -> float:
    """The share of ``rounds`` in which ``SpotChecks``, drawing k of a sender's ``bodies`` kept
    bodies with a seeded generator, picks at least one of its ``cheats`` forged ones."""
    caught = 0
    picker = random.Random(seed)
    for _ in range(rounds):
        got = received({"cheater": bodies})
        state, transport = admitted(got), Transport()
        checks = SpotChecks("me", transport, Checker(forged=got["cheater"][:cheats]), per_sender=k, _random=picker)  # type: ignore[arg-type]
        check(checks, state, got)
        caught += bool(transport.accused)
    return caught / rounds


@pytest.mark.parametrize(("bodies", "cheats", "k"), [(8, 1, 1), (8, 2, 1), (8, 2, 2), (8, 4, 1), (8, 8, 1)])
def test_a_partial_cheaters_detection_rate_is_the_hypergeometric_one(bodies: int, cheats: int, k: int) -> None:
    """k = 1 catches a sender that cheats on a fraction f of its bodies with probability f a check;
    k checks without replacement with 1 - C(n - m, k) / C(n, k); every body forged, always."""
    expected = 1 - math.comb(bodies - cheats, k) / math.comb(bodies, k)
    rounds = 2_000
    measured = caught_share(bodies, cheats, k, rounds, seed=bodies * 100 + cheats * 10 + k)
    spread = 4 * math.sqrt(expected * (1 - expected) / rounds)  # 4 sd of a binomial share (seeded: no flake either way)
    assert abs(measured - expected) <= spread, (measured, expected)


def test_verified_is_a_plain_typed_record() -> None:
    mark = Verified("a", 0, 3, (1, 2), body("t"))
    assert mark == Verified("a", 0, 3, (1, 2), body("t"))  # the body object is not part of its value
