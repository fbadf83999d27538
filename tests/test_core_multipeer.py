"""The core loop among several peers on an in-memory board: what each peer accepts, how it
scores and ranks the swarm, and what its trust book makes of misbehaving senders.

Strangers (helpers.Stranger) post before the honest peers play, so every exchange finds their
payloads already on the board: the tests are deterministic and need no waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from genrl_swarm.comm import InMemoryBackend, InMemorySwarm
from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core import Body, GameConfig, GameManager, GameState, RoundResult, StageInput, tie_break
from genrl_swarm.core.trust import TrustConfig

from helpers import RecordingGame, Stranger, echo


def inputs_of(round: int, stage: int, tasks: int = 2) -> list[StageInput]:
    """What RecordingGame shows in (round, stage): a stranger can compute it too."""
    game = RecordingGame([], tasks)
    state = GameState(round, "x")
    state.set_tasks(game.round_tasks(round))
    return game.stage_inputs(state, stage)


class Answers(RecordingGame):
    """Answers every input with the same outputs; reward is the share of "a" among them."""

    def __init__(self, *outputs: str) -> None:
        super().__init__([])
        self.outputs = outputs

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        return [echo(i, *self.outputs) for i in inputs]


def play(games: dict[str, RecordingGame], rounds: int = 2, **config: Any) -> dict[str, list[RoundResult]]:
    """Honest peers (named as ``games``) play ``rounds`` together in threads."""
    swarm = InMemorySwarm()
    comms = {peer: InMemoryBackend(swarm, peer) for peer in games}
    coordinator = LocalCoordinator()
    results: dict[str, list[RoundResult]] = {}

    def run(peer: str) -> None:
        game, cfg = games[peer], GameConfig(max_rounds=rounds, exchange_timeout=10, **config)
        results[peer] = GameManager(game, game, game, game, comms[peer], coordinator, cfg).run()

    threads = [threading.Thread(target=run, args=(peer,)) for peer in games]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_every_peer_ranks_three_peers_by_their_mean_reward() -> None:
    results = play({"low": Answers("b", "b"), "high": Answers("a", "a"), "mid": Answers("a", "b")})
    for rounds in results.values():
        for r in rounds:
            assert r.rewards == {"high": 1.0, "low": 0.0, "mid": 0.5}
            assert r.winners == ("high",)


def test_a_three_way_tie_has_the_same_per_round_winner_on_every_peer() -> None:
    peers = ("p1", "p2", "p3")
    results = play({p: Answers("a", "b") for p in peers}, rounds=3)
    for r in range(3):
        expected = (min(peers, key=lambda p: tie_break(r, p)),)
        assert {results[p][r].winners for p in peers} == {expected}
        assert all(results[p][r].rewards == dict.fromkeys(peers, 0.5) for p in peers)


def alone_with(
    *strangers_posts: tuple[Stranger, int, int, list[Body]], rounds: int = 1, stages: int = 1, **trust: Any
) -> tuple[list[RoundResult], GameManager]:
    """One honest peer "me" plays while strangers' posts wait on the board."""
    swarm = InMemorySwarm()
    comm = InMemoryBackend(swarm, "me")
    for stranger, r, s, bodies in strangers_posts:
        stranger.swarm = swarm
        stranger.send(r, s, bodies)
    game = RecordingGame([])
    cfg = GameConfig(max_rounds=rounds, num_stages=stages, exchange_timeout=0.5)
    manager = GameManager(game, game, game, game, comm, LocalCoordinator(), cfg, trust=TrustConfig(**trust))
    manager.hooks.after_stage.append(lambda m, state, s, ex: STATES.append(state))
    return manager.run(), manager


STATES: list[GameState] = []  # the states alone_with's peer played, latest last


def test_bodies_for_the_previous_stage_in_a_later_stage_envelope_are_refused() -> None:
    s0, s1 = inputs_of(0, 0), inputs_of(0, 1)
    honest, replayer = Stranger(None), Stranger(None)
    (result,), manager = alone_with(
        (honest, 0, 0, [echo(i, "a") for i in s0]), (honest, 0, 1, [echo(i, "a") for i in s1]),
        (replayer, 0, 0, [echo(i, "a") for i in s0]), (replayer, 0, 1, [echo(i, "a") for i in s0]),  # stage-0 bodies again
        stages=2,
    )  # fmt: skip
    assert result.dropped == {replayer.peer_id: 2}
    assert result.metrics["swarm/peers_s1"] == 3 and result.metrics["swarm/refused_s1"] == 2
    assert result.metrics["swarm/refused_s0"] == 0 and result.metrics["trust/dropped_view"] == 2  # later stage: never counted


def test_bodies_of_the_previous_round_in_this_rounds_envelope_are_refused() -> None:
    stale = Stranger(None)
    (_, result), _ = alone_with((stale, 1, 0, [echo(i, "a") for i in inputs_of(0, 0)]), rounds=2)
    assert result.round == 1 and result.dropped == {stale.peer_id: 2}
    assert sorted(result.rewards) == ["me"]


def test_late_and_unreadable_senders_are_told_apart_and_only_the_unreadable_one_is_quarantined() -> None:
    swarm = InMemorySwarm()
    silent, garbage = Stranger(swarm), Stranger(swarm)
    silent.commit(0, 0, b"a payload it never reveals")
    swarm.post(0, 0, "commit", garbage.peer_id, b"\x00\xff not msgpack")
    comm = InMemoryBackend(swarm, "me")
    game = RecordingGame([])
    manager = GameManager(game, game, game, game, comm, LocalCoordinator(), GameConfig(max_rounds=1, exchange_timeout=0.4))
    seen: list[tuple[GameState, Any]] = []
    manager.hooks.after_stage.append(lambda m, state, s, ex: seen.append((state, ex)))
    (result,) = manager.run()
    assert result.dropped == {silent.peer_id: 1, garbage.peer_id: 1}
    (state, exchange), kinds = seen[0], {silent.peer_id: "late", garbage.peer_id: "payload"}
    assert sorted((d.peer_id, d.stage, d.task_id, d.kind, d.reason) for d in state.drops) == sorted(
        (peer, 0, None, kinds[peer], why) for peer, why in exchange.dropped.items()
    )
    assert exchange.late == {silent.peer_id}  # typed, not parsed back from the reason
    assert result.metrics["trust/dropped_late"] == 1 and result.metrics["trust/dropped_payload"] == 1
    assert manager.book.quarantined(1) == frozenset({garbage.peer_id}) and result.metrics["trust/quarantined"] == 1
    assert result.metrics["swarm/peers_s0"] == 1


def test_a_sender_over_budget_is_not_recorded_and_its_size_is_what_it_committed_to() -> None:
    inputs = inputs_of(0, 0)
    big, fine = Stranger(None), Stranger(None)
    (result,), manager = alone_with((big, 0, 0, [echo(i, "a", "a", "a") for i in inputs]), (fine, 0, 0, [echo(i, "a") for i in inputs]), max_units=4)
    assert result.dropped == {big.peer_id: 1} and sorted(result.rewards) == sorted(["me", fine.peer_id])
    assert result.metrics["swarm/peers_s0"] == 2 and result.metrics["trust/dropped_budget"] == 1
    assert manager.book.reasons[big.peer_id] == "budget: 6 tokens/steps, over trust.max_units=4"
    assert [(d.peer_id, d.stage, d.kind) for d in STATES[-1].drops] == [(big.peer_id, 0, "budget")]
    (result,), manager = alone_with((Stranger(None), 0, 0, [echo(i, "a") for i in inputs]), max_bytes=50)
    assert result.metrics["trust/dropped_budget"] == 1 and sorted(result.rewards) == ["me"]


def test_a_quarantined_sender_is_not_read_in_the_following_rounds() -> None:
    flooder = Stranger(None)
    posts = [(flooder, r, 0, [echo(i, *"abc") for i in inputs_of(r, 0)]) for r in range(3)]
    results, manager = alone_with(*posts, rounds=3, max_units=4, quarantine_rounds=1)
    assert [r.dropped for r in results] == [{flooder.peer_id: 1}, {}, {flooder.peer_id: 1}]  # read again in round 2
    assert [r.metrics["trust/quarantined"] for r in results] == [1, 0, 1]


class Accounts(LocalCoordinator):
    account = "0xabc"

    def __init__(self) -> None:
        super().__init__()
        self.learned: list[dict[str, str]] = []

    def learn_accounts(self, accounts: Any) -> None:
        self.learned.append(dict(accounts))


def test_each_peer_signs_its_coordinator_account_and_learns_the_others() -> None:
    swarm = InMemorySwarm()
    comms = [InMemoryBackend(swarm, p) for p in ("a", "b", "c")]
    coordinators = [Accounts() for _ in comms]

    def run(i: int) -> None:
        game = RecordingGame([])
        GameManager(game, game, game, game, comms[i], coordinators[i], GameConfig(max_rounds=1, exchange_timeout=10)).run()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(c.learned == [dict.fromkeys("abc", "0xabc")] for c in coordinators)


class ChokesOnB(RecordingGame):
    """Stage-1 inputs built from the swarm's stage-0 text: chokes on a body that said "b"."""

    def stage_inputs(self, state: GameState, stage: int) -> list[StageInput]:
        if stage == 1 and any("b" in r.texts for r in state.select(stage=0)):
            raise ValueError("cannot parse b")
        return super().stage_inputs(state, stage)


@pytest.mark.parametrize("mine, train_every", [("a", "round"), ("a", "stage"), ("b", "round")])
def test_stage_inputs_that_fail_on_a_sender_drop_it_and_this_peers_failure_is_raised(mine: str, train_every: str) -> None:
    s0 = inputs_of(0, 0)
    good, bad = Stranger(InMemorySwarm()), Stranger(None)
    bad.swarm = good.swarm
    good.send(0, 0, [echo(i, "a") for i in s0])
    bad.send(0, 0, [echo(i, "b") for i in s0])
    comm = InMemoryBackend(good.swarm, "me")
    game = ChokesOnB([])
    game.act = lambda inputs, stage, greedy=False: game.seen_inputs.extend(inputs) or [echo(i, mine) for i in inputs]  # type: ignore[method-assign]
    cfg = GameConfig(max_rounds=1, num_stages=2, exchange_timeout=0.3, train_every=train_every)  # type: ignore[arg-type]
    manager = GameManager(game, game, game, game, comm, LocalCoordinator(), cfg)
    if mine == "b":
        with pytest.raises(ValueError, match="cannot parse b"):
            manager.run()
        return
    seen: list[GameState] = []
    manager.hooks.after_stage.append(lambda m, state, s, ex: seen.append(state))
    (result,) = manager.run()
    assert result.dropped == {bad.peer_id: 1} and sorted(result.rewards) == sorted(["me", good.peer_id])
    assert {i.stage for i in game.seen_inputs} == {0, 1}  # stage 1 was built, without the culprit
    (culprit,) = seen[0].drops
    assert (culprit.stage, culprit.task_id, culprit.kind) == (1, None, "scoring")
    assert culprit.reason == "building stage-1 inputs failed: ValueError: cannot parse b"
    assert bad.peer_id not in seen[0].peers() and good.peer_id in seen[0].peers(stage=0)


class Fragile(RecordingGame):
    """Game code that chokes on a peer's "boom" when scoring; burns CPU on a peer's "slow"."""

    def score(self, task: Any, input: StageInput, rollout: Any) -> list[float]:
        if "boom" in rollout.texts:
            raise KeyError("boom")
        if "slow" in rollout.texts:
            end = time.thread_time() + 0.02
            while time.thread_time() < end:
                pass
        return super().score(task, input, rollout)


@pytest.mark.parametrize("train_every", ["round", "stage"])
def test_a_body_that_breaks_scoring_is_one_drop_whatever_the_training_schedule(train_every: str) -> None:
    inputs = inputs_of(0, 0)
    swarm, game = InMemorySwarm(), Fragile([])
    evil = Stranger(swarm)
    evil.send(0, 0, [echo(inputs[0], "boom"), echo(inputs[1], "a")])
    cfg = GameConfig(max_rounds=1, exchange_timeout=0.5, train_every=train_every)  # type: ignore[arg-type]
    (result,) = GameManager(game, game, game, game, InMemoryBackend(swarm, "me"), LocalCoordinator(), cfg).run()
    assert result.dropped == {evil.peer_id: 1} and result.metrics["trust/dropped_scoring"] == 1
    assert result.rewards == {"me": 0.5, evil.peer_id: 1.0} and result.winners == (evil.peer_id,)
    assert [len(r.scored) for r in game.trained] == [3]


@pytest.mark.parametrize("train_every", ["round", "stage"])
def test_a_stranger_over_the_cpu_budget_loses_its_other_bodies_in_the_loop(train_every: str) -> None:
    inputs = inputs_of(0, 0, tasks=3)
    swarm, game = InMemorySwarm(), Fragile([], tasks=3)
    slow = Stranger(swarm)
    slow.send(0, 0, [echo(i, "slow") for i in inputs])
    cfg = GameConfig(max_rounds=1, exchange_timeout=0.5, train_every=train_every)  # type: ignore[arg-type]
    manager = GameManager(game, game, game, game, InMemoryBackend(swarm, "me"), LocalCoordinator(), cfg, trust=TrustConfig(cpu_budget=0.01))
    (result,) = manager.run()
    assert result.dropped == {slow.peer_id: 2} and result.metrics["trust/dropped_cpu"] == 2
    assert manager.book.quarantined(1) == frozenset()  # this peer's load decides the cut: cut, not quarantined


class SlowText(RecordingGame):
    def texts(self, body: Any) -> tuple[str, ...]:
        end = time.thread_time() + 0.02
        while time.thread_time() < end:
            pass
        return super().texts(body)


def test_a_stranger_whose_bodies_are_slow_to_check_is_cut_off_in_the_loop() -> None:
    inputs = inputs_of(0, 0, tasks=3)
    swarm, game = InMemorySwarm(), SlowText([], tasks=3)
    slow = Stranger(swarm)
    slow.send(0, 0, [echo(i, "a") for i in inputs])
    cfg = GameConfig(max_rounds=1, exchange_timeout=0.5)
    (result,) = GameManager(game, game, game, game, InMemoryBackend(swarm, "me"), LocalCoordinator(), cfg, trust=TrustConfig(cpu_budget=0.01)).run()
    assert result.dropped == {slow.peer_id: 1} and result.metrics["trust/dropped_cpu"] == 1
    assert result.rewards == {"me": 0.5, slow.peer_id: 1.0}  # its first body was read, then it ran out
