"""The SAPO draw ranks competing swarm groups by what they teach the receiver, so ids cannot
multiply a sender's share (issue 42; ``lm/selection.py``, ``lm/swarm_value.py``)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("torch")
import torch  # noqa: E402, F401 - the learner's forward

from genrl_swarm.core import GameState, Rollout, RoundRewards, ScoredRollout, StageInput, Task, TokenRollout, TokenSample  # noqa: E402
from genrl_swarm.paradigms.lm.learner import GRPOLearner  # noqa: E402
from genrl_swarm.paradigms.lm.policy import LMPolicy  # noqa: E402
from genrl_swarm.paradigms.lm.selection import draw_external  # noqa: E402

SYBILS = 9


@pytest.fixture(scope="module")
def policy() -> LMPolicy:
    return LMPolicy("tiny-random", {"num_generations": 3, "max_new_tokens": 6}, seed=1)


@pytest.fixture(scope="module")
def task() -> StageInput:
    return Task.create("Calculate 3 + 4.").input(0)


def group(policy: LMPolicy, inp: StageInput, peer: str, completions: list[tuple[int, ...]], rewards: tuple[float, ...]) -> ScoredRollout:
    samples = tuple(TokenSample(c, (-1.0,) * len(c), "length") for c in completions)
    body = TokenRollout(inp.task_id, inp.digest, tuple(policy.prompt_ids(inp)), samples, 0, policy.fingerprint)
    return ScoredRollout(Rollout(peer, 0, 0, body, policy.texts(body)), rewards)


def greedy(policy: LMPolicy, inp: StageInput) -> tuple[int, ...]:
    """The policy's own most likely completion: the likeliest a sender could send."""
    return tuple(policy.rollouts([inp], greedy=True)[0].samples[0].completion_ids)


def sybils_and_honest(policy: LMPolicy, inp: StageInput, sybil: tuple[int, ...], honest: tuple[int, ...], sybil_reward: float) -> list[ScoredRollout]:
    """Nine ids sending a distinct completion each (reward ``sybil_reward``) and two honest senders
    (reward 1), every group with a zero-reward second completion: all informative."""
    zero = (99, 98)
    bad = [group(policy, inp, f"sybil-{i}", [sybil + (300 + i,), zero], (sybil_reward, 0.0)) for i in range(SYBILS)]
    good = [group(policy, inp, f"honest-{i}", [honest, zero], (1.0, 0.0)) for i in range(2)]
    return bad + good


def chosen_senders(learner: GRPOLearner, own: ScoredRollout, swarm: list[ScoredRollout]) -> list[str]:
    chosen = learner.select(GameState(0, "me"), RoundRewards(0, (own, *swarm)))
    return sorted(c.rollout.peer_id for c in chosen if c.rollout.peer_id != "me")


def test_nine_ids_with_lower_rewards_never_take_a_slot_from_better_groups(policy: LMPolicy, task: StageInput) -> None:
    """Before: senders took turns whatever their groups held, so 9 of 11 turns went to the ids."""
    learner = GRPOLearner(policy, {"num_external": 2}, seed=0)
    own = group(policy, task, "me", [greedy(policy, task), (99,)], (0.0, 0.0))
    swarm = sybils_and_honest(policy, task, greedy(policy, task), greedy(policy, task), sybil_reward=0.5)
    for seed in range(20):  # whatever the random turn order
        learner.rng = random.Random(seed)
        assert chosen_senders(learner, own, swarm) == ["honest-0", "honest-1"]


def test_nine_ids_with_equal_rewards_but_unlikely_completions_never_take_a_slot(policy: LMPolicy, task: StageInput) -> None:
    """Same reward, so the gain ties: this peer's own probability of each completion decides."""
    learner = GRPOLearner(policy, {"num_external": 2}, seed=0)
    likely = greedy(policy, task)
    unlikely = tuple(random.Random(0).choices(range(300, 400), k=len(likely)))
    closeness = learner.closeness(sybils_and_honest(policy, task, unlikely[:-1], likely, 1.0)[SYBILS - 1 : SYBILS + 1])
    assert closeness[1] > 10 * closeness[0], closeness
    own = group(policy, task, "me", [likely, (99,)], (0.0, 0.0))
    for seed in range(20):
        learner.rng = random.Random(seed)
        assert chosen_senders(learner, own, sybils_and_honest(policy, task, unlikely[:-1], likely, 1.0)) == ["honest-0", "honest-1"]


def test_a_group_no_better_than_the_receivers_own_is_worth_nothing(policy: LMPolicy, task: StageInput) -> None:
    learner = GRPOLearner(policy, {"num_external": 1}, seed=0)
    own = [group(policy, task, "me", [greedy(policy, task), (99,)], (1.0, 0.0))]  # own mean 0.5
    swarm = [
        group(policy, task, "a", [greedy(policy, task), (98,)], (0.5, 0.0)),
        group(policy, task, "b", [greedy(policy, task), (97,)], (0.75, 0.0)),
    ]
    assert learner.swarm_values(swarm, own) == [(0.0, 0.0), (0.25, pytest.approx(learner.closeness(swarm[1:])[0]))]


def test_with_room_for_every_group_no_forward_runs(policy: LMPolicy, task: StageInput, monkeypatch: pytest.MonkeyPatch) -> None:
    learner = GRPOLearner(policy, {"num_external": 11}, seed=0)
    monkeypatch.setattr(learner, "closeness", lambda groups: pytest.fail("valued groups that all fit"))
    own = group(policy, task, "me", [greedy(policy, task), (99,)], (0.0, 0.0))
    assert len(chosen_senders(learner, own, sybils_and_honest(policy, task, (5,), (6,), 0.5))) == 11


def test_equal_values_still_take_turns_and_the_cap_keeps_a_senders_best(policy: LMPolicy, task: StageInput) -> None:
    flood = [group(policy, task, "flooder", [(i,), (99,)], (1.0, 0.0)) for i in range(10)]
    other = [group(policy, task, "other", [(7,), (99,)], (1.0, 0.0))]
    for seed in range(20):  # equal values: the flooder's many groups get a fair share, not the room
        chosen = draw_external(flood + other, 2, random.Random(seed), value=lambda groups: [(1.0,)] * len(groups))
        assert sorted(c.rollout.peer_id for c in chosen) == ["flooder", "other"]
    ranked = lambda groups: [(float(g.rollout.body.samples[0].completion_ids[0]),) for g in groups]  # noqa: E731
    chosen = draw_external(flood, 5, random.Random(0), max_per_sender=2, value=ranked)
    assert [c.rollout.body.samples[0].completion_ids[0] for c in chosen] == [9, 8]


def test_closeness_reads_the_opening_a_swarm_completion_teaches(policy: LMPolicy, task: StageInput) -> None:
    """Past ``OPENING`` tokens the path budget weighs a swarm completion at ~0, so its tail
    neither raises nor lowers its value (nor costs the receiver a forward over it)."""
    from genrl_swarm.paradigms.lm.swarm_value import OPENING

    opening = tuple(random.Random(1).choices(range(30, 200), k=OPENING))
    likely, unlikely = opening + greedy(policy, task), opening + (399,) * 40
    groups = [group(policy, task, peer, [c, (99,)], (1.0, 0.0)) for peer, c in (("a", likely), ("b", unlikely))]
    learner = GRPOLearner(policy, {"micro_batch_size": 1}, seed=0)
    assert learner.closeness(groups) == pytest.approx(learner.closeness([group(policy, task, "c", [opening, (99,)], (1.0, 0.0))]) * 2)


def test_a_better_answer_outranks_a_likelier_worse_one(policy: LMPolicy, task: StageInput) -> None:
    """The hostile review's shape (``test_review_swarm_value.py``): likely decoys (reward 0.5) from
    3 ids against unlikely target groups (reward 1) from 2 honest senders. Valued gain x closeness,
    the likely decoys won; gain first, they never do."""
    learner = GRPOLearner(policy, {"num_external": 2}, seed=0)
    likely, unlikely = greedy(policy, task), tuple(random.Random(2).choices(range(300, 400), k=len(greedy(policy, task))))
    own = group(policy, task, "me", [likely, (99,)], (0.0, 0.0))
    decoys = [group(policy, task, f"sybil-{i}", [likely, (98, i)], (0.5, 0.0)) for i in range(3)]
    targets = [group(policy, task, f"honest-{i}", [unlikely[:-1] + (300 + i,), (97,)], (1.0, 0.0)) for i in range(2)]
    for seed in range(20):
        learner.rng = random.Random(seed)
        assert chosen_senders(learner, own, decoys + targets) == ["honest-0", "honest-1"]


def test_no_external_share_values_nothing_and_a_nan_reward_never_outranks_a_gain(
    policy: LMPolicy, task: StageInput, monkeypatch: pytest.MonkeyPatch
) -> None:
    """num_external 0 (the default) draws nothing, so nothing is valued (no forward); a NaN
    reward counts as absent, so a NaN gain never ties with, and scrambles, real gains."""
    learner = GRPOLearner(policy, {"num_external": 0}, seed=0)
    monkeypatch.setattr(learner, "closeness", lambda groups: pytest.fail("valued groups with no external share"))
    own = group(policy, task, "me", [greedy(policy, task), (99,)], (0.0, 0.0))
    assert chosen_senders(learner, own, sybils_and_honest(policy, task, (5,), (6,), 0.5)) == []
    learner = GRPOLearner(policy, {"num_external": 1}, seed=0)
    nan = group(policy, task, "nan", [greedy(policy, task), (98,)], (float("nan"), 0.0))
    swarm = [
        group(policy, task, "poor", [greedy(policy, task), (97,)], (0.1, 0.0)),
        nan,
        group(policy, task, "good", [greedy(policy, task), (96,)], (0.9, 0.0)),
    ]
    assert [v[0] for v in learner.swarm_values(swarm, [own])] == [0.1, 0.0, 0.9]


def test_only_groups_at_the_last_slots_gain_are_read_and_at_most_room_of_them_per_sender() -> None:
    from genrl_swarm.paradigms.lm.swarm_value import at_the_cut

    gain = [0.9, 0.5, 0.5, 0.5, 0.2, 0.0, 0.5]
    senders = ["a", "b", "b", "b", "c", "d", "c"]
    assert at_the_cut(gain, senders, room=2) == [1, 2, 6]  # 0.9 is drawn whatever; 0.5 fills the last slot
    assert at_the_cut(gain, senders, room=1) == [0]
    assert at_the_cut([0.9, 0.9, 0.5], ["a", "a", "b"], room=2) == [0, 1]
    assert at_the_cut([0.9, 0.9, 0.5], ["a", "a", "b"], room=2, cap=1) == [0, 1, 2]  # a keeps one: b's 0.5 is the last slot
    assert at_the_cut(gain, senders, room=9) == []  # room for every group with a gain: the last slot's gain is 0
    assert at_the_cut([0.0, 0.0], ["a", "b"], room=1) == [] and at_the_cut(gain, senders, room=0) == []


def test_a_sender_of_many_groups_at_the_cut_costs_the_receiver_at_most_room_openings(
    policy: LMPolicy, task: StageInput, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The valuation's forward is bounded per sender: a flooder sending 40 groups as good as the
    honest ones (the same gain) has at most ``num_external`` of them read, and its others rank
    after every group that was read."""
    learner = GRPOLearner(policy, {"num_external": 3}, seed=0)
    read: list[str] = []
    forward = learner.closeness
    monkeypatch.setattr(learner, "closeness", lambda groups: read.extend(g.rollout.peer_id for g in groups) or forward(groups))
    own = group(policy, task, "me", [greedy(policy, task), (99,)], (0.0, 0.0))
    flood = [group(policy, task, "flooder", [(30 + i,), (99,)], (1.0, 0.0)) for i in range(40)]
    honest = [group(policy, task, f"honest-{i}", [greedy(policy, task), (98,)], (1.0, 0.0)) for i in range(2)]
    chosen = chosen_senders(learner, own, flood + honest)
    assert read.count("flooder") == 3 and read.count("honest-0") == read.count("honest-1") == 1
    assert len(chosen) == 3 and {"honest-0", "honest-1"} <= set(chosen)


def drawn(groups: list[ScoredRollout], values: list[tuple[float, float]], room: int, cap: int, seed: int) -> set[int]:
    """The indices ``draw_external`` draws when group i is worth ``values[i]``."""
    index = {id(g): i for i, g in enumerate(groups)}
    chosen = draw_external(groups, room, random.Random(seed), cap, lambda g: True, lambda gs: [values[index[id(g)]] for g in gs])
    return {index[id(g)] for g in chosen}


def test_reading_only_the_groups_at_the_cut_draws_what_reading_every_group_draws(policy: LMPolicy, task: StageInput) -> None:
    """A property over random draws (gains on a coarse grid, so ties are common; caps on and off):
    closeness read for every group with a gain (as before) and read only ``at_the_cut`` give the same draw
    whenever no sender has more than ``room`` groups at one gain (a flooder's others rank after)."""
    from genrl_swarm.paradigms.lm.swarm_value import at_the_cut

    rng, checked = random.Random(0), 0
    for case in range(3000):
        n, room, cap = rng.randint(1, 9), rng.randint(1, 4), rng.choice([0, 0, 1, 2])
        gain = [rng.choice([0.0, 0.5, 0.9]) for _ in range(n)]
        senders = [f"s{rng.randint(0, 3)}" for _ in range(n)]
        close = [rng.random() for _ in range(n)]
        if any(sum(1 for j in range(n) if (senders[j], gain[j]) == (senders[i], gain[i])) > room for i in range(n)):
            continue
        groups = [group(policy, task, senders[i], [(i + 1,)], (gain[i],)) for i in range(n)]
        read = set(at_the_cut(gain, senders, room, cap))
        full = drawn(groups, [(g, c if g > 0 else 0.0) for g, c in zip(gain, close)], room, cap, case)  # every group with a gain read
        part = drawn(groups, [(g, c if i in read else 0.0) for i, (g, c) in enumerate(zip(gain, close))], room, cap, case)
        assert full == part, (gain, senders, room, cap, sorted(read))
        checked += 1
    assert checked > 1000


def test_a_group_without_a_finite_reward_gains_nothing_even_against_negative_rewards(policy: LMPolicy, task: StageInput) -> None:
    from genrl_swarm.paradigms.lm.swarm_value import gains

    own = [group(policy, task, "me", [(1,), (2,)], (-1.0, -0.5))]
    swarm = [group(policy, task, "a", [(3,)], (-0.6,)), group(policy, task, "b", [(4,)], (float("nan"),))]
    assert gains(swarm, own) == [pytest.approx(0.15), 0.0]
