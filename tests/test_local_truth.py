"""Stage inputs and rewards come from this peer's own state: forged inputs are dropped, picks are
scored against the offer this peer built, and a peer's body that breaks scoring costs only it."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from genrl_swarm.comm import InMemoryBackend
from genrl_swarm.comm.codec import Codec
from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core import DataManager, GameConfig, GameManager, GameState, RoundRewards, ScoredRollout, StageInput, Task
from genrl_swarm.core.admission import admit
from genrl_swarm.core.types import Rollout, RoundResult
from genrl_swarm.games.bandit import ArmPulls, BanditData, BanditReward, SoftmaxPolicy
from genrl_swarm.games.multistage_math import MultistageMathData, MultistageReward

from helpers import Echo, RecordingGame, echo


def bandit_round() -> tuple[GameState, BanditData, SoftmaxPolicy, int, int]:
    """A round after stage 0 where this peer ('me') proposed only the worst arm of the first task."""
    data, policy = BanditData(num_contexts=4, num_arms=8, tasks_per_round=1, seed=1), SoftmaxPolicy(num_contexts=4)
    state = GameState(0, "me")
    state.set_tasks(data.round_tasks(0))
    (inp,) = data.stage_inputs(state, 0)
    payoffs = data.payoffs[inp.context["context"]]
    worst, best = payoffs.index(min(payoffs)), payoffs.index(max(payoffs))
    admit(state, 0, [inp], {"me": [ArmPulls(inp.task_id, inp.digest, (worst,), (-0.1,))]}, policy.check)
    return state, data, policy, worst, best


def test_bandit_forged_offer_is_dropped_and_an_unoffered_pick_scores_zero() -> None:
    state, data, policy, worst, best = bandit_round()
    (mine,) = data.stage_inputs(state, 1)
    assert mine.context["options"] == [worst]
    forged = StageInput(mine.task_id, 1, f"context x | options {best}", {**mine.context, "options": [best]})
    received = {
        "me": [ArmPulls(mine.task_id, mine.digest, (worst,), (0.0,))],
        "forger": [ArmPulls(mine.task_id, forged.digest, (best,), (0.0,))],  # claims the best arm was on offer
        "cheeky": [ArmPulls(mine.task_id, mine.digest, (best,), (-5.0,))],  # same offer, picks outside it
    }
    drops = admit(state, 1, [mine], received, policy.check)
    assert [(d.peer_id, "answers input" in d.reason) for d in drops] == [("forger", True)]
    rewards = BanditReward().score_state(state, stage=1).mean_by_peer()
    assert rewards == {"cheeky": 0.0, "me": pytest.approx(min(data.payoffs[mine.context["context"]]))}


class OneQuestion(DataManager):
    def round_tasks(self, round: int) -> list[Task]:
        return [Task.create("What is 2 + 3?", answer="5")]


def test_multistage_math_forged_listing_is_dropped_and_picks_score_against_own_listing() -> None:
    data, reward = MultistageMathData(source=OneQuestion()), MultistageReward()
    state = GameState(0, "me")
    state.set_tasks(data.round_tasks(0))
    (q,) = data.stage_inputs(state, 0)
    texts = lambda body: body.outputs  # noqa: E731 - this peer's derived text
    admit(state, 0, [q], {"me": [echo(q, "<answer>4</answer>")], "peer-b": [echo(q, "<answer>7</answer>")]}, derive=texts)
    (mine,) = data.stage_inputs(state, 1)
    assert mine.context["students"] == ["4", "7"]  # me, peer-b: both wrong
    forged = StageInput(mine.task_id, 1, mine.prompt.replace("Student #1: 4", "Student #1: 5"), {"students": ["5", "7"]})
    received = {
        "me": [echo(mine, "Choice: Student #2")],
        "forger": [echo(forged, "Choice: Student #1")],  # on the old code: reward 1.0
        "honest": [echo(mine, "Choice: Student #1")],
    }
    drops = admit(state, 1, [mine], received, derive=texts)
    assert [d.peer_id for d in drops] == ["forger"]
    assert reward.score_state(state, stage=1).mean_by_peer() == {"honest": 0.0, "me": 0.0}


def test_bodies_for_unknown_tasks_and_second_bodies_are_dropped() -> None:
    game = RecordingGame([], tasks=3)
    state = GameState(0, "me")
    state.set_tasks(game.round_tasks(0))
    inputs = game.stage_inputs(state, 0)
    stranger = StageInput("f" * 24, 0, "another question")
    received = {"me": [echo(i, "a") for i in inputs], "p": [echo(inputs[0], "a"), echo(inputs[0], "b"), echo(stranger, "a")]}
    drops = admit(state, 0, inputs, received, derive=game.texts)
    assert sorted(d.reason.split(" ")[0] + d.reason.split(" ")[1] for d in drops) == ["asecond", "taskffffffffffffffffffffffff"]
    assert len(state.select(peer="p")) == 1 and state.drops_by_peer() == {"p": 2}
    flood = [echo(inputs[0], str(i)) for i in range(1000)]
    drops = admit(state, 1, inputs, {"me": [], "flood": flood}, derive=game.texts)
    second = f"a second body for task {inputs[0].task_id}"
    assert [d.reason for d in drops] == ["1000 bodies for 3 tasks; the 997 extra were not read", second, second]


def test_policy_check_refusal_is_counted_in_the_round_result() -> None:
    comms = InMemoryBackend.spawn(2)
    refusing = RecordingGame([])
    refusing.check = lambda body, inp: "not for me" if isinstance(body, Echo) else None  # type: ignore[method-assign]
    results: dict[str, Any] = {}

    def play(comm: InMemoryBackend, game: RecordingGame) -> None:
        cfg = GameConfig(max_rounds=2, exchange_timeout=5)
        results[comm.peer_id] = GameManager(game, game, game, game, comm, LocalCoordinator(), cfg).run()

    threads = [threading.Thread(target=play, args=(c, g)) for c, g in zip(comms, (refusing, RecordingGame([])))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # peer-0 refuses everything, its own bodies included (check runs on every body it records).
    assert all(r.dropped == {"peer-0": 2, "peer-1": 2} for r in results["peer-0"])
    assert all(r.dropped == {} and sorted(r.rewards) == ["peer-0", "peer-1"] for r in results["peer-1"])


class Fragile(RecordingGame):
    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        if "boom" in rollout.texts:
            raise KeyError("game code choked on a peer's output")
        return super().score(task, input, rollout)


def test_a_body_that_breaks_scoring_drops_its_sender_not_the_peer() -> None:
    game = Fragile([])
    state = GameState(0, "me")
    state.set_tasks(game.round_tasks(0))
    inputs = game.stage_inputs(state, 0)
    admit(state, 0, inputs, {"me": [echo(i, "a") for i in inputs], "evil": [echo(inputs[0], "boom")]}, derive=game.texts)
    rewards = game.score_state(state)
    assert rewards.mean_by_peer() == {"me": 1.0} and [d.peer_id for d in state.drops] == ["evil"]
    admit(state, 1, inputs, {"me": [echo(i, "boom") for i in inputs]}, derive=game.texts)
    with pytest.raises(KeyError):
        game.score_state(state)  # this peer's own bug is not hidden


def test_a_body_of_another_type_is_a_payload_error() -> None:
    q = Task.create("q").input(0)
    data = Codec().encode("x", 0, 0, [echo(q, "a")])
    with pytest.raises(ValueError, match="Invalid value 'echo'"):
        Codec().decode(data, ArmPulls)


def test_ties_are_broken_per_round_and_the_same_everywhere() -> None:
    peers = [f"peer-{i}" for i in range(4)]
    wins: Counter[str] = Counter()
    for r in range(3000):
        inp = Task.create("q").input(0)
        scored = [ScoredRollout(Rollout(p, r, 0, echo(inp, "a")), (0.5,)) for p in peers]
        first = RoundRewards(r, tuple(scored)).winners()
        assert RoundRewards(r, tuple(reversed(scored))).winners() == first  # order of arrival does not matter
        wins.update(first)
    assert all(600 < wins[p] < 900 for p in peers), wins  # each ~750; the old rule gave peer-0 all 3000


def test_a_legal_but_extreme_behaviour_logprob_does_not_crash_the_bandit_learner() -> None:
    from genrl_swarm.games.bandit import SoftmaxLearner

    state, data, policy, worst, best = bandit_round()
    (inp,) = data.stage_inputs(state, 0)
    admit(state, 0, [inp], {"evil": [ArmPulls(inp.task_id, inp.digest, (best, best, best, worst), (-800.0,) * 4)]}, policy.check)
    SoftmaxLearner(policy).train(state, BanditReward().score_state(state))  # exp(-800) == 0.0: no division by it
    assert all(abs(x) < 1e6 for x in policy.logits.ravel())


def test_one_peer_casts_one_vote_whatever_it_sends() -> None:
    data = MultistageMathData(source=OneQuestion())
    state = GameState(0, "me")
    state.set_tasks(data.round_tasks(0))
    (q,) = data.stage_inputs(state, 0)
    texts = lambda body: body.outputs  # noqa: E731
    admit(state, 0, [q], {"me": [echo(q, "<answer>5</answer>")], "b": [echo(q, "<answer>7</answer>")]}, derive=texts)
    (pick,) = data.stage_inputs(state, 1)
    stuffed = echo(pick, *(" ".join(["Choice: Student #2"] * 40) for _ in range(200)))
    admit(state, 1, [pick], {"me": [echo(pick, "Choice: Student #1")], "b": [stuffed]}, derive=texts)
    (final,) = data.stage_inputs(state, 2)
    assert final.context["votes"] == {"1": 1, "2": 1}
    assert len(final.prompt) < 2 * len(pick.prompt)


def test_peer_text_cannot_make_answer_parsing_expensive() -> None:
    import time

    from genrl_swarm.paradigms.lm.answers import answers_match

    start = time.perf_counter()
    assert not answers_match("1e30000000", "5") and not answers_match("9" * 100_000 + "/7", "5")
    assert answers_match("0.50", "1/2") and answers_match("2e3", "2000")
    assert time.perf_counter() - start < 0.5  # Fraction("1e30000000") alone took 72 s


def test_a_round_counts_once_for_its_winner_however_many_peers_vote() -> None:
    coordinator = LocalCoordinator()
    for peer in ("a", "b", "c"):
        coordinator.register(peer)
        coordinator.report(RoundResult(0, peer, {"a": 1.0}, ("a",)))
    assert coordinator.tally("a") == (1.0, 1)
