"""Core units, one rule per test: ids and digests every peer computes alike, the per-body checks
of ``GameState.record``, round results among several peers (means, ties, winners), the trust
book's budgets and quarantines, the body invariants and the peer identity format.

Literal hashes and ids below are pinned on purpose: peers running different versions must
derive the same task ids, input digests, tie orders and peer ids, or they silently stop agreeing.
"""

from __future__ import annotations

import math
import os
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from genrl_swarm.comm import NullBackend
from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core import (
    Array,
    ArraySpec,
    Body,
    Communication,
    Coordinator,
    DataManager,
    Drop,
    ExchangeResult,
    GameConfig,
    GameManager,
    GameState,
    Hooks,
    Policy,
    Rollout,
    RoundResult,
    RoundRewards,
    RunInterrupted,
    ScoredRollout,
    StageInput,
    Task,
    TokenRollout,
    TokenSample,
    content_id,
    tie_break,
)
from genrl_swarm.core.admission import admit
from genrl_swarm.core.bodies import MIN_COPY_UNITS, check_logprobs
from genrl_swarm.core.identity import (
    Identity,
    IdentityError,
    b58decode,
    b58encode,
    peer_id_of,
    public_key_of,
    verify,
    verify_key,
)
from genrl_swarm.core.trust import LATE_WINDOW, SenderBook, TrustConfig
from genrl_swarm.paradigms.agents.bodies import Episode, Turn
from genrl_swarm.paradigms.marl.bodies import Trajectory

from helpers import RecordingGame, echo


# --------------------------------------------------------------------------- types: ids and digests
def test_content_id_is_pinned_and_ignores_dict_order() -> None:
    assert content_id("2 + 3?") == "e52e42aee2ebd90e328674f6"
    assert content_id("q", None, {"b": 1, "a": "é"}) == "ad52725bc041a33d646c9d13"  # non-ASCII hashed as UTF-8
    assert content_id("q", None, {"a": "é", "b": 1}) == "ad52725bc041a33d646c9d13"


def test_content_id_takes_values_json_cannot_encode() -> None:
    assert content_id(Path("/a/b")) == content_id("/a/b")  # str() of the value, not an error


def test_task_id_hashes_prompt_answer_metadata_and_public_part() -> None:
    task = Task.create("What is 2 + 3?", answer="5")
    assert task.id == "ad1596f2a19e02176e52bf79" and task.input(0).digest == "1e6ba51f8b46bbbedbd6fb2d"
    others = [
        Task.create("What is 2 + 4?", answer="5"),
        Task.create("What is 2 + 3?", answer="6"),
        Task.create("What is 2 + 3?", answer="5", level=2),
        Task.create("What is 2 + 3?", answer="5", public={"hint": "add"}),
    ]
    assert len({task.id, *(t.id for t in others)}) == 5


def test_task_create_keeps_metadata_for_scoring_and_copies_public() -> None:
    public = {"arms": [1, 2]}
    task = Task.create("q", answer=None, public=public, seed=3)
    public["arms"] = "changed later"
    assert (task.answer, task.metadata, task.public) == (None, {"seed": 3}, {"arms": [1, 2]})


def test_stage_input_shows_public_part_and_context_never_the_answer() -> None:
    task = Task.create("q", answer="42", public={"a": 1, "b": 2}, secret="s")
    inp = task.input(1, b=3, c=4)
    assert (inp.task_id, inp.stage, inp.prompt, inp.context) == (task.id, 1, "q", {"a": 1, "b": 3, "c": 4})
    assert task.input(2, "new prompt").prompt == "new prompt"
    assert task.input().stage == 0


@pytest.mark.parametrize(
    "other",
    [
        StageInput("t" * 24, 1, "p", {"k": 1}),
        StageInput("u" * 24, 0, "p", {"k": 1}),
        StageInput("t" * 24, 0, "P", {"k": 1}),
        StageInput("t" * 24, 0, "p", {"k": 2}),
    ],
)
def test_input_digest_covers_task_stage_prompt_and_context(other: StageInput) -> None:
    base = StageInput("t" * 24, 0, "p", {"k": 1})
    assert base.digest != other.digest and len(base.digest) == 24
    assert base.digest == StageInput("t" * 24, 0, "p", {"k": 1}).digest


def test_tie_break_is_pinned_and_changes_with_the_round() -> None:
    assert tie_break(7, "peer-1") == "fcde761868c4c5d38e86ddafdafad58ed9ab44fb5b13d82bd5ce7df7a918d83a"
    assert tie_break(8, "peer-1") != tie_break(7, "peer-1")


def test_drop_defaults_to_refused_and_only_provable_kinds_are_hard() -> None:
    from genrl_swarm.core.types import DropKind

    assert Drop("p", 0, None, "why").kind is DropKind.REFUSED and Drop("p", 0, None, "why", "late").kind is DropKind.LATE
    assert {k for k in DropKind if k.hard} == {DropKind.PAYLOAD, DropKind.EQUIVOCATION, DropKind.FORGED, DropKind.BUDGET}
    assert not DropKind.CPU.hard and not DropKind.CPU.counted  # load decides it: never held against the sender
    assert {k for k in DropKind if k.counted} == {DropKind.REFUSED, DropKind.SCORING}  # late, copy, view: never


# --------------------------------------------------------------------------- round results
INP = Task.create("q").input(0)


def scored(peer: str, *rewards: float, round: int = 0, stage: int = 0) -> ScoredRollout:
    return ScoredRollout(Rollout(peer, round, stage, echo(INP, *("x" for _ in rewards))), tuple(rewards))


def test_scored_rollout_mean_is_over_its_samples() -> None:
    assert scored("a", 1.0, 0.0, 0.5).mean == 0.5
    assert Rollout("a", 0, 0, echo(INP, "x")).task_id == INP.task_id


def test_mean_by_peer_averages_samples_not_rollouts_and_sorts_peers() -> None:
    rewards = RoundRewards(0, (scored("c", 1.0), scored("a", 0.0, 0.0, 0.0), scored("a", 1.0), scored("b", 0.25, 0.75)))
    means = rewards.mean_by_peer()
    assert list(means) == ["a", "b", "c"]
    assert means == {"a": 0.25, "b": 0.5, "c": 1.0}  # a: 1 of 4 samples, not the mean of (0, 1)


def test_select_and_mean_by_peer_filter_by_stage_and_peer() -> None:
    rewards = RoundRewards(0, (scored("a", 1.0, stage=0), scored("a", 0.0, stage=1), scored("b", 0.5, stage=1)))
    assert rewards.mean_by_peer(stage=1) == {"a": 0.0, "b": 0.5}
    assert [s.rollout.stage for s in rewards.select(peer="a")] == [0, 1]
    assert [s.rollout.peer_id for s in rewards.select(stage=1)] == ["a", "b"]
    assert [s.rewards for s in rewards.select(peer="a", stage=1)] == [(0.0,)]
    assert len(rewards.select()) == 3


def test_winner_is_the_highest_mean_among_several_peers() -> None:
    rewards = RoundRewards(4, (scored("low", 0.1), scored("high", 0.9), scored("mid", 0.5), scored("mid2", 0.5)))
    assert rewards.winners() == ("high",)
    assert rewards.winners(top_k=2)[0] == "high" and set(rewards.winners(top_k=2)[1:]) <= {"mid", "mid2"}
    assert set(rewards.winners(top_k=10)) == {"low", "high", "mid", "mid2"} and rewards.winners(top_k=10)[-1] == "low"


def test_winner_ignores_negative_means_below_the_rest() -> None:
    rewards = RoundRewards(0, (scored("a", -1.0), scored("b", -0.5), scored("c", -2.0)))
    assert rewards.winners(top_k=3) == ("b", "a", "c")


@pytest.mark.parametrize("round", [0, 1, 2, 3, 11])
def test_three_way_tie_follows_tie_break_order_below_a_clear_winner(round: int) -> None:
    tied = ["p1", "p2", "p3"]
    rewards = RoundRewards(round, (*(scored(p, 0.5, round=round) for p in tied), scored("top", 0.75), scored("last", 0.0)))
    expected = ("top", *sorted(tied, key=lambda p: tie_break(round, p)), "last")
    assert rewards.winners(top_k=5) == expected
    assert rewards.winners() == ("top",)


def test_tie_winner_changes_between_rounds() -> None:
    firsts = {RoundRewards(r, tuple(scored(p, 1.0, round=r) for p in ("a", "b", "c"))).winners()[0] for r in range(12)}
    assert firsts == {"a", "b", "c"}


def test_round_with_no_scores_has_no_winner() -> None:
    assert RoundRewards(0, ()).winners() == () and RoundRewards(0, ()).mean_by_peer() == {}


def test_round_result_defaults_are_empty() -> None:
    result = RoundResult(0, "me", {"me": 1.0}, ("me",))
    assert (result.metrics, result.dropped) == ({}, {})


# --------------------------------------------------------------------------- GameState.record
def round_state(tasks: int = 2, round: int = 0, peer: str = "me") -> tuple[GameState, list[StageInput], RecordingGame]:
    game = RecordingGame([], tasks)
    state = GameState(round, peer)
    state.set_tasks(game.round_tasks(round))
    return state, game.stage_inputs(state, 0), game


def test_a_body_built_for_another_stage_is_refused() -> None:
    state, stage0, game = round_state()
    admit(state, 0, stage0, {"me": [echo(i, "a") for i in stage0]})
    stage1 = game.stage_inputs(state, 1)
    stale = echo(stage0[0], "a")  # a stage-0 body replayed in stage 1: same task, other digest
    drops = admit(state, 1, stage1, {"me": [echo(i, "a") for i in stage1], "p": [stale]})
    assert [(d.peer_id, d.stage, d.task_id, d.kind) for d in drops] == [("p", 1, stale.task_id, "view")]  # dropped, never counted
    assert drops[0].reason == f"answers input {stage0[0].digest}, this peer built {stage1[0].digest} for task {stale.task_id}"
    assert state.select(stage=1, peer="p") == []


def test_a_body_from_another_round_is_refused_as_an_unknown_task() -> None:
    state, inputs, _ = round_state(round=1)
    _, old_inputs, _ = round_state(round=0)
    drops = admit(state, 0, inputs, {"me": [echo(i, "a") for i in inputs], "p": [echo(old_inputs[0], "a")]})
    assert [(d.reason, d.kind) for d in drops] == [(f"task {old_inputs[0].task_id} is not one of this peer's stage-0 tasks", "refused")]
    assert state.peers() == ["me"]
    # Where honest peers' tasks can differ (DataManager.tasks_differ: per-peer mixes, curriculum
    # levels) the same body is a difference of view, never counted toward quarantine.
    state, inputs, _ = round_state(round=1)
    drops = admit(state, 0, inputs, {"me": [echo(i, "a") for i in inputs], "p": [echo(old_inputs[0], "a")]}, tasks_differ=True)
    assert [d.kind for d in drops] == ["foreign"] and not drops[0].kind.counted and not drops[0].kind.hard


def test_record_keeps_rollouts_in_commitment_order_with_round_stage_and_text() -> None:
    state, inputs, game = round_state(round=3)
    received = {"z": [echo(inputs[1], "a")], "me": [echo(i, "b") for i in inputs], "a": [echo(inputs[0], "c", "d")]}
    assert admit(state, 0, inputs, received, derive=game.texts) == []
    assert [(r.peer_id, r.round, r.stage, r.task_id, r.texts) for r in state.rollouts] == [
        ("z", 3, 0, inputs[1].task_id, ("a",)),
        ("me", 3, 0, inputs[0].task_id, ("b",)),
        ("me", 3, 0, inputs[1].task_id, ("b",)),
        ("a", 3, 0, inputs[0].task_id, ("c", "d")),
    ]
    assert state.inputs == {0: {i.task_id: i for i in inputs}}


def test_record_without_derive_stores_no_text() -> None:
    state, inputs, _ = round_state(tasks=1)
    admit(state, 0, inputs, {"me": [echo(inputs[0], "a")]})
    assert state.rollouts[0].texts == ()


def test_a_refused_body_still_uses_up_its_task() -> None:
    state, inputs, _ = round_state(tasks=2)
    inp = inputs[0]
    forged = StageInput(inp.task_id, 0, "another prompt")
    drops = admit(state, 0, inputs, {"p": [echo(forged, "a"), echo(inp, "a")]})
    assert [d.reason.split(" ")[0] for d in drops] == ["answers", "a"]  # forged, then "a second body" for its task
    assert state.rollouts == []


def test_check_refusal_is_recorded_with_its_reason() -> None:
    state, inputs, _ = round_state()
    seen: list[tuple[str, str]] = []

    def check(body: Any, inp: StageInput) -> str | None:
        seen.append((body.task_id, inp.digest))
        return "too long" if body.outputs == ("long",) else None

    drops = admit(state, 0, inputs, {"p": [echo(inputs[0], "long"), echo(inputs[1], "ok")]}, check)
    assert [(d.task_id, d.reason, d.kind) for d in drops] == [(inputs[0].task_id, "too long", "refused")]
    assert seen == [(i.task_id, i.digest) for i in inputs]  # check gets this peer's own input
    assert [r.task_id for r in state.rollouts] == [inputs[1].task_id]


def test_check_is_not_called_on_a_body_already_refused() -> None:
    state, inputs, _ = round_state(tasks=1)
    calls: list[str] = []
    admit(state, 0, inputs, {"p": [echo(StageInput(inputs[0].task_id, 0, "x"), "a")]}, lambda b, i: calls.append("x"))
    assert calls == []


def test_surplus_bodies_are_one_drop_with_the_counts() -> None:
    state, inputs, _ = round_state(tasks=2)
    bodies = [echo(inputs[0], "a"), echo(inputs[1], "a"), echo(inputs[0], "b")]
    drops = admit(state, 0, inputs, {"p": bodies})
    assert [(d.peer_id, d.stage, d.task_id, d.reason) for d in drops] == [("p", 0, None, "3 bodies for 2 tasks; the 1 extra were not read")]
    assert len(state.select(peer="p")) == 2
    assert admit(state, 1, inputs, {"q": bodies[:2]}) == []  # exactly one per task: nothing extra


def test_a_second_body_for_a_task_is_dropped_and_the_first_kept() -> None:
    state, inputs, game = round_state(tasks=3)
    received = {"p": [echo(inputs[0], "first"), echo(inputs[0], "second")], "q": [echo(inputs[0], "q")]}
    drops = admit(state, 0, inputs, received, derive=game.texts)
    assert [(d.peer_id, d.task_id, d.reason) for d in drops] == [("p", inputs[0].task_id, f"a second body for task {inputs[0].task_id}")]
    assert [(r.peer_id, r.texts) for r in state.rollouts] == [("p", ("first",)), ("q", ("q",))]  # one per sender


def test_drops_accumulate_over_stages_and_count_per_sender() -> None:
    state, inputs, _ = round_state(tasks=1)
    bad = echo(StageInput(inputs[0].task_id, 0, "x"), "a")
    admit(state, 0, inputs, {"b": [bad], "a": [bad], "me": [echo(inputs[0], "a")]})
    admit(state, 1, inputs, {"b": [bad]})
    assert state.drops_by_peer() == {"a": 1, "b": 2} and list(state.drops_by_peer()) == ["a", "b"]
    assert [d.stage for d in state.drops] == [0, 0, 1]


def test_missing_sender_is_simply_absent_from_the_round() -> None:
    state, inputs, _ = round_state()
    admit(state, 0, inputs, {"me": [echo(i, "a") for i in inputs], "a": [echo(inputs[0], "a")], "b": []})
    assert state.peers() == ["a", "me"] and state.drops == []
    assert [r.task_id for r in state.swarm()] == [inputs[0].task_id]


def long_tokens(inp: StageInput, start: int = 0, n: int = MIN_COPY_UNITS) -> TokenRollout:
    sample = TokenSample(tuple(range(start, start + n)), (-0.1,) * n, "stop")
    return TokenRollout(inp.task_id, inp.digest, (1,), (sample,), 0, "tok")


def test_copies_among_several_senders_count_only_for_the_first_committer() -> None:
    state, inputs, _ = round_state(tasks=2)
    work, other = long_tokens(inputs[0]), long_tokens(inputs[0], start=1)
    received = {"a": [work], "b": [other], "c": [work], "d": [work, long_tokens(inputs[1])]}
    assert admit(state, 0, inputs, received) == []  # de-duplicated, never a drop
    reason = "identical to the body a committed to first"
    assert [(d.peer_id, d.task_id, d.reason, d.kind) for d in state.copies] == [
        ("c", inputs[0].task_id, reason, "copy"),
        ("d", inputs[0].task_id, reason, "copy"),
    ]
    assert [(r.peer_id, r.task_id) for r in state.rollouts] == [
        ("a", inputs[0].task_id), ("b", inputs[0].task_id), ("d", inputs[1].task_id),
    ]  # fmt: skip


def test_the_same_work_for_another_task_is_not_a_copy() -> None:
    state, inputs, _ = round_state(tasks=2)
    body0, body1 = long_tokens(inputs[0]), long_tokens(inputs[1])
    assert admit(state, 0, inputs, {"a": [body0], "b": [body1]}) == []


def test_a_refused_body_does_not_claim_its_content_first() -> None:
    state, inputs, _ = round_state(tasks=1)
    calls: list[int] = []

    def refuse_the_first(body: Any, inp: StageInput) -> str | None:
        calls.append(1)
        return "refused" if len(calls) == 1 else None

    work = long_tokens(inputs[0])
    drops = admit(state, 0, inputs, {"first": [work], "second": [work]}, refuse_the_first)
    assert [(d.peer_id, d.kind) for d in drops] == [("first", "refused")]  # "second" is no copy of a refused body
    assert [r.peer_id for r in state.rollouts] == ["second"]


def test_game_code_failing_on_a_stranger_drops_it_with_the_error() -> None:
    state, inputs, _ = round_state(tasks=1)

    def derive(body: Any) -> tuple[str, ...]:
        raise KeyError("boom")

    drops = admit(state, 0, inputs, {"p": [echo(inputs[0], "a")]}, derive=derive)
    assert [(d.reason, d.kind) for d in drops] == [("checking it failed: KeyError: 'boom'", "scoring")]


def test_cpu_budget_cuts_a_stranger_but_never_this_peer() -> None:
    state, inputs, game = round_state(tasks=3)

    def slow(body: Any) -> tuple[str, ...]:
        end = __import__("time").thread_time() + 0.02
        while __import__("time").thread_time() < end:
            pass
        return game.texts(body)

    received = {"me": [echo(i, "a") for i in inputs], "p": [echo(i, "a") for i in inputs]}
    drops = admit(state, 2, inputs, received, derive=slow, cpu_budget=0.01)
    assert [(d.peer_id, d.stage, d.task_id, d.kind, d.reason) for d in drops] == [
        ("p", 2, None, "cpu", "checking its bodies took over 0.01s of CPU; 2 left unread")
    ]
    assert [r.peer_id for r in state.rollouts] == ["me", "me", "me", "p"]


def test_state_queries_by_stage_task_and_peer() -> None:
    state, inputs, game = round_state(tasks=2)
    admit(state, 0, inputs, {"me": [echo(i, "a") for i in inputs], "p": [echo(inputs[1], "a")]})
    stage1 = game.stage_inputs(state, 1)
    admit(state, 1, stage1, {"p": [echo(stage1[0], "a")]})
    assert state.stages == [0, 1]
    assert [r.peer_id for r in state.select(task=inputs[1].task_id)] == ["me", "p"]
    assert [(r.stage, r.peer_id) for r in state.select(stage=1)] == [(1, "p")]
    assert [(r.stage, r.task_id) for r in state.select(peer="p")] == [(0, inputs[1].task_id), (1, stage1[0].task_id)]
    assert len(state.select(stage=0, task=inputs[1].task_id, peer="p")) == 1
    assert [r.peer_id for r in state.local()] == ["me", "me"] and state.local(stage=1) == []
    assert [r.stage for r in state.swarm()] == [0, 1] and [r.stage for r in state.swarm(stage=1)] == [1]
    assert state.peers() == ["me", "p"] and state.peers(stage=1) == ["p"]
    assert state.input_for(state.select(stage=1)[0]) == stage1[0]


def test_stages_are_sorted_whatever_order_they_were_recorded_in() -> None:
    state, inputs, _ = round_state(tasks=1)
    for stage in (2, 0, 1):
        admit(state, stage, inputs, {})
    assert state.stages == [0, 1, 2]


# --------------------------------------------------------------------------- trust: budgets and quarantine
@pytest.mark.parametrize("field", ["max_bytes", "max_units", "max_soft_drops", "quarantine_rounds"])
def test_trust_limits_must_not_be_negative(field: str) -> None:
    with pytest.raises(ValueError, match=f"^trust.{field} must be >= 0, got -1$"):
        TrustConfig(**{field: -1})  # type: ignore[arg-type]
    TrustConfig(**{field: 0})  # type: ignore[arg-type]


@pytest.mark.parametrize("budget", [0.0, -1.0, 1e6, math.inf, math.nan])
def test_trust_cpu_budget_must_be_positive_and_finite(budget: float) -> None:
    with pytest.raises(ValueError, match=f"^trust.cpu_budget must be > 0 seconds, got {budget}$"):
        TrustConfig(cpu_budget=budget)


def test_trust_defaults() -> None:
    config = TrustConfig()
    assert (config.max_bytes, config.max_units, config.cpu_budget, config.max_soft_drops, config.quarantine_rounds) == (
        2 << 20, 1 << 20, 2.0, 8, 3,
    )  # fmt: skip
    assert TrustConfig(cpu_budget=999_999.0).cpu_budget == 999_999.0 and TrustConfig(cpu_budget=0.5).cpu_budget == 0.5


def test_over_budget_allows_exactly_the_limit_and_never_counts_this_peer() -> None:
    book = SenderBook(TrustConfig(max_bytes=100, max_units=4), "me")
    two = [echo(INP, "a", "b")]  # 2 units each
    received = {"me": two * 5, "at": two * 2, "bytes": two, "units": two * 3, "silent": []}
    sizes = {"me": 10**6, "at": 100, "bytes": 101, "units": 100}
    drops = book.over_budget(1, received, sizes)
    assert [(d.peer_id, d.stage, d.task_id, d.kind, d.reason) for d in drops] == [
        ("bytes", 1, None, "budget", "101 bytes, over trust.max_bytes=100"),
        ("units", 1, None, "budget", "6 tokens/steps, over trust.max_units=4"),
    ]


def test_over_budget_counts_a_sender_without_a_known_size_by_units_only() -> None:
    book = SenderBook(TrustConfig(max_bytes=0, max_units=1), "me")
    assert [d.peer_id for d in book.over_budget(0, {"a": [echo(INP, "x")], "b": [echo(INP, "x", "y")]}, {})] == ["b"]


def hard(peer: str, kind: str = "payload") -> Drop:
    return Drop(peer, 0, None, "unreadable", kind)


@pytest.mark.parametrize("kind", ["payload", "equivocation", "budget"])
def test_a_hard_drop_quarantines_from_the_next_round_for_quarantine_rounds(kind: str) -> None:
    book = SenderBook(TrustConfig(quarantine_rounds=3), "me")
    assert book.close_round(5, [hard("bad", kind), hard("bad", kind)]) == {"bad": f"{kind}: unreadable"}
    assert [r for r in range(6, 12) if "bad" in book.quarantined(r)] == [6, 7, 8]
    assert book.reasons == {"bad": f"{kind}: unreadable"}


def test_a_cpu_drop_is_counted_in_the_metrics_but_never_quarantines() -> None:
    """Over this peer's CPU budget: its load decides that, no other peer reproduces it."""
    book = SenderBook(TrustConfig(quarantine_rounds=3, max_soft_drops=0), "me")
    assert book.close_round(5, [hard("busy", "cpu") for _ in range(20)]) == {}
    assert not book.quarantined(6) and book.counters() == {"trust/dropped_cpu": 20.0}


def test_soft_drops_quarantine_only_above_max_soft_drops_per_round() -> None:
    book = SenderBook(TrustConfig(max_soft_drops=3, quarantine_rounds=1), "me")
    soft = lambda peer, n: [Drop(peer, 0, f"t{i}", "no", "refused") for i in range(n)]  # noqa: E731
    scoring = [Drop("over", 0, "t9", "boom", "scoring")]
    new = book.close_round(2, soft("me", 50) + soft("at", 3) + soft("over", 3) + scoring)
    assert new == {"over": "4 bodies refused in round 2 (trust.max_soft_drops=3)"}
    assert book.quarantined(3) == frozenset({"over"}) and book.quarantined(4) == frozenset()
    assert not book.close_round(3, soft("at", 3))  # the count starts again every round


def test_copies_never_quarantine_and_this_peer_is_never_counted() -> None:
    book = SenderBook(TrustConfig(max_soft_drops=0), "me")
    copies = [Drop("framed", 0, f"t{i}", "identical", "copy") for i in range(20)]
    assert book.close_round(0, [hard("me"), *copies]) == {}
    assert book.counters() == {"trust/dropped_copy": 20.0}


def test_lateness_is_remembered_within_the_window_and_never_quarantines() -> None:
    late = Drop("slow", 0, None, "no commitment", "late")
    book = SenderBook(TrustConfig(max_soft_drops=0), "me")
    assert LATE_WINDOW == 4
    assert book.close_round(0, [late, late, late]) == {}  # one round, however many stages
    assert book.close_round(3, [late]) == {} and book.close_round(4, [late] * 20) == {}  # before: quarantined in round 3
    assert book.late == {"slow": {3, 4}}
    far = SenderBook(TrustConfig(), "me")
    assert far.close_round(0, [late]) == {} and far.close_round(4, [late]) == {}  # round 0 left the window
    assert far.late == {"slow": {4}}


def test_one_drop_reason_per_newly_quarantined_sender_hard_first() -> None:
    book = SenderBook(TrustConfig(max_soft_drops=0), "me")
    drops = [Drop("x", 0, "t", "no", "refused"), hard("x", "budget"), hard("x", "payload")]
    assert book.close_round(0, drops) == {"x": "budget: unreadable"}


def test_quarantine_rounds_zero_counts_but_never_quarantines() -> None:
    book = SenderBook(TrustConfig(quarantine_rounds=0), "me")
    assert book.close_round(0, [hard("bad")]) == {"bad": "payload: unreadable"}
    assert book.quarantined(1) == frozenset() and book.reasons == {} and book.counters() == {"trust/dropped_payload": 1.0}


def test_several_senders_quarantine_independently_and_counters_sum_all_rounds() -> None:
    book = SenderBook(TrustConfig(quarantine_rounds=2, max_soft_drops=1), "me")
    book.close_round(0, [hard("a"), Drop("b", 0, "t", "no"), Drop("c", 0, "t", "no"), Drop("c", 0, "u", "no")])
    assert book.quarantined(1) == frozenset({"a", "c"})
    book.close_round(1, [hard("b", "budget"), Drop("c", 0, "t", "no")])
    assert book.quarantined(2) == frozenset({"a", "b", "c"})
    assert book.quarantined(3) == frozenset({"b"})
    assert book.counters() == {"trust/dropped_budget": 1.0, "trust/dropped_payload": 1.0, "trust/dropped_refused": 4.0}
    assert list(book.counters()) == ["trust/dropped_budget", "trust/dropped_payload", "trust/dropped_refused"]
    assert book.drops[("c", "refused")] == 3


def test_quarantine_is_logged_with_its_length_and_reason(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        SenderBook(TrustConfig(quarantine_rounds=4), "me").close_round(0, [hard("bad")])
    assert caplog.messages == ["me quarantines bad for 4 round(s): payload: unreadable"]


# --------------------------------------------------------------------------- interfaces: defaults and scoring
class TwoQuestions(DataManager):
    def round_tasks(self, round: int) -> list[Task]:
        return [Task.create(f"q{round}", public={"n": 1}), Task.create(f"r{round}")]


def test_default_stage_inputs_show_each_task_in_stage_0_and_name_a_missing_stage() -> None:
    data = TwoQuestions()
    state = GameState(0, "me")
    state.set_tasks(data.round_tasks(0))
    assert data.stage_inputs(state, 0) == [t.input(0) for t in data.round_tasks(0)]
    with pytest.raises(NotImplementedError, match="^TwoQuestions has no stage 1: override stage_inputs$"):
        data.stage_inputs(state, 1)
    assert data.eval_tasks() == []


def test_default_policy_and_coordinator_hooks() -> None:
    game, coordinator = RecordingGame([]), SoloBooks()
    assert Policy.check(game, echo(INP, "a"), INP) is None and Policy.texts(game, echo(INP, "a")) == ()
    assert Communication.swarm_round(NullBackend()) == 0
    assert coordinator.tally("a") == (2.5, 0) and coordinator.tally("nobody") == (0.0, 0)
    assert Coordinator.standings(coordinator) == {} and coordinator.account == "" and SoloBooks.shared_per_process


class SoloBooks(Coordinator):
    """The least a coordinator implements; standings as a fixed table."""

    def register(self, peer_id: str) -> None: ...

    def current_round(self) -> int:
        return 0

    def report(self, result: RoundResult) -> None: ...

    def standings(self) -> dict[str, float]:
        return {"a": 2.5}


@pytest.mark.parametrize(
    "result, text",
    [
        (ExchangeResult({"a": (), "b": ()}), "got 2 of ?"),
        (ExchangeResult({"a": ()}, {"b": "late: x", "c": "bad"}, expected=3), "got 1 of 3, dropped 2"),
        (ExchangeResult({}, expected=0), "got 0 of 0"),
    ],
)
def test_exchange_summary(result: ExchangeResult, text: str) -> None:
    assert result.summary() == text
    assert ExchangeResult({}).dropped == {} and ExchangeResult({}).sizes == {} and ExchangeResult({}).accounts == {}


class Picky(RecordingGame):
    """Scores 1.0 per "a"; gives one reward too few for bodies that say "short"."""

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        rewards = super().score(task, input, rollout)
        return rewards[1:] if "short" in rollout.texts else rewards


def scored_state(received: dict[str, list[Any]], stages: int = 1) -> tuple[GameState, Picky]:
    game = Picky([], 2)
    state = GameState(2, "me")
    state.set_tasks(game.round_tasks(2))
    for s in range(stages):
        inputs = game.stage_inputs(state, s)
        admit(state, s, inputs, {p: [echo(inputs[i], *texts) for i, texts in enumerate(b)] for p, b in received.items()}, derive=game.texts)
    return state, game


def test_score_state_scores_every_sender_against_this_peers_task() -> None:
    state, game = scored_state({"me": [("a", "b"), ("a",)], "p": [("b",)], "q": [("a", "a", "b", "b")]})
    rewards = game.score_state(state)
    assert rewards.round == 2
    assert [(s.rollout.peer_id, s.rewards) for s in rewards.scored] == [
        ("me", (1.0, 0.0)), ("me", (1.0,)), ("p", (0.0,)), ("q", (1.0, 1.0, 0.0, 0.0)),
    ]  # fmt: skip


def test_score_state_filters_by_stage() -> None:
    state, game = scored_state({"me": [("a",)], "p": [("b",)]}, stages=2)
    assert {s.rollout.stage for s in game.score_state(state, stage=1).scored} == {1}
    assert len(game.score_state(state, stage=1).scored) == 2 and len(game.score_state(state).scored) == 4


def test_a_wrong_number_of_rewards_drops_a_stranger_and_is_a_bug_for_this_peer() -> None:
    state, game = scored_state({"p": [("a", "short")], "q": [("a",)]})
    rewards = game.score_state(state)
    assert [s.rollout.peer_id for s in rewards.scored] == ["q"]
    assert [(d.peer_id, d.stage, d.task_id, d.kind, d.reason) for d in state.drops] == [
        ("p", 0, state.rollouts[0].task_id, "scoring", "scoring failed: ValueError: Picky.score gave 1 rewards for 2 samples"),
    ]
    own, game = scored_state({"me": [("a", "short")]})
    with pytest.raises(ValueError, match="^Picky.score gave 1 rewards for 2 samples$"):
        game.score_state(own)


def test_scoring_failure_is_logged_with_the_sender(caplog: pytest.LogCaptureFixture) -> None:
    state, game = scored_state({"p": [("a", "short")]})
    with caplog.at_level("WARNING"):
        game.score_state(state)
    assert caplog.messages == ["me: scoring p's body failed (Picky.score gave 1 rewards for 2 samples); dropped"]


class Slow(RecordingGame):
    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        end = time.thread_time() + 0.02
        while time.thread_time() < end:
            pass
        return super().score(task, input, rollout)


def test_score_cpu_budget_counts_per_stranger_and_never_this_peer() -> None:
    game = Slow([], 3)
    state = GameState(0, "me")
    state.set_tasks(game.round_tasks(0))
    inputs = game.stage_inputs(state, 0)
    admit(state, 0, inputs, {p: [echo(i, "a") for i in inputs] for p in ("me", "p", "q")}, derive=game.texts)
    rewards = game.score_state(state, cpu_budget=0.03)  # two bodies cost 0.04 s: the third is not scored
    assert [s.rollout.peer_id for s in rewards.scored] == ["me"] * 3 + ["p"] * 2 + ["q"] * 2
    assert [(d.peer_id, d.stage, d.task_id, d.kind, d.reason) for d in state.drops] == [
        (p, 0, inputs[2].task_id, "cpu", "scoring its bodies took over 0.03s of CPU") for p in ("p", "q")
    ]


# --------------------------------------------------------------------------- bodies: invariants
def test_logprobs_must_be_one_finite_non_positive_value_per_token() -> None:
    check_logprobs((), (), "x")
    check_logprobs((0.0, -1e300), (1, 2), "x")  # 0.0 itself is legal: a certain token
    with pytest.raises(ValueError, match=r"^completion: 1 log-probs for 2 tokens$"):
        check_logprobs((-0.1,), (1, 2), "completion")


@pytest.mark.parametrize("bad", [0.5, math.nan, -math.inf, math.inf])
def test_logprob_error_names_the_first_bad_value(bad: float) -> None:
    with pytest.raises(ValueError, match=rf"^x: log-prob {bad!r} is not a finite value <= 0$"):
        check_logprobs((0.0, -0.1, bad, 0.7), (1, 2, 3, 4), "x")


def test_logprobs_whose_sum_is_not_finite_are_refused_naming_the_first() -> None:
    with pytest.raises(ValueError, match=r"^x: log-prob -1e\+308 is not a finite value <= 0$"):
        check_logprobs((-1e308, -1.5e308), (1, 2), "x")  # no sampler produces these; the sum overflows


def test_a_sample_names_itself_in_its_logprob_error() -> None:
    with pytest.raises(ValueError, match=r"^completion: 1 log-probs for 2 tokens$"):
        TokenSample((1, 2), (-0.1,), "stop")


def sample(n: int, start: int = 0) -> TokenSample:
    return TokenSample(tuple(range(start, start + n)), (-0.5,) * n, "length")


def test_token_rollout_counts_samples_and_units_and_keys_only_long_work() -> None:
    body = TokenRollout(INP.task_id, INP.digest, (1, 2, 3), (sample(10), sample(20)), 0, "tok")
    assert (body.num_samples, body.units, body.content_key()) == (2, 33, None)
    at = TokenRollout(INP.task_id, INP.digest, (), (sample(MIN_COPY_UNITS - 1), sample(1)), 0, "tok")
    below = TokenRollout(INP.task_id, INP.digest, (1,) * 50, (sample(MIN_COPY_UNITS - 1),), 0, "tok")
    assert at.content_key() == msgspec.msgpack.encode([s.completion_ids for s in at.samples])
    assert below.content_key() is None  # prompt ids are not the sender's work
    other = TokenRollout(INP.task_id, INP.digest, (), (sample(1), sample(MIN_COPY_UNITS - 1)), 0, "tok")
    assert other.content_key() != at.content_key()


def test_base_body_is_one_sample_with_no_copy_key() -> None:
    body = Body(INP.task_id, INP.digest)
    assert (body.num_samples, body.units, body.content_key()) == (1, 1, None)
    assert (echo(INP, "a", "b").num_samples, echo(INP, "a", "b").units) == (2, 2)  # units follow num_samples


def test_only_assistant_turns_carry_logprobs() -> None:
    with pytest.raises(ValueError, match="^a tool turn was not sampled and has no log-probs$"):
        Turn("tool", (1,), (-0.1,))
    with pytest.raises(ValueError, match="^assistant turn: 1 log-probs for 2 tokens$"):
        Turn("assistant", (1, 2), (-0.1,))
    assert Turn("user", (1, 2)).logprobs == ()


def episode(*turns: Turn) -> Episode:
    return Episode(INP.task_id, INP.digest, turns, "answer", 0, "tok")


def test_episode_units_and_copy_key_count_only_sampled_tokens_for_the_key() -> None:
    user, said = Turn("user", tuple(range(100))), Turn("assistant", tuple(range(MIN_COPY_UNITS)), (-0.1,) * MIN_COPY_UNITS)
    assert episode(user).units == 100 and episode(user).content_key() is None
    assert episode(user, said).units == 100 + MIN_COPY_UNITS
    assert episode(user, said).content_key() == msgspec.msgpack.encode([said.token_ids])
    short = Turn("assistant", tuple(range(MIN_COPY_UNITS - 1)), (-0.1,) * (MIN_COPY_UNITS - 1))
    assert episode(user, short).content_key() is None


def test_episode_longer_than_the_token_ceiling_is_refused() -> None:
    from genrl_swarm.core.bodies import MAX_TOKENS

    turn = Turn("user", (0,) * MAX_TOKENS)
    assert episode(*[turn] * 4).units == 4 * MAX_TOKENS
    with pytest.raises(ValueError, match="^episode is longer than the token ceiling$"):
        episode(*[turn] * 4, Turn("user", (0,)))


def test_array_checks_its_byte_count_and_round_trips_numpy() -> None:
    with pytest.raises(ValueError, match=r"^array of int32\[2, 3\] needs 24 bytes, got 23$"):
        Array("int32", (2, 3), b"\0" * 23)
    assert Array("float64", (), b"\0" * 8).numpy().shape == ()
    value = np.arange(6, dtype=">i4").reshape(2, 3)  # big-endian in: little-endian on the wire
    sent = Array.of(value)
    assert (sent.dtype, sent.shape, sent.data[:4]) == ("int32", (2, 3), b"\0\0\0\0")
    assert sent.data[4:8] == (1).to_bytes(4, "little")
    assert np.array_equal(sent.numpy(), value) and not sent.numpy().flags.writeable
    with pytest.raises(ValueError, match=r"^dtype complex128 cannot be sent \(use one of \['bool', "):
        Array.of(np.zeros(2, complex))


def traj(steps: int, **fields: Any) -> Trajectory:
    arrays = {
        "observations": Array.of(np.zeros((steps, 2), np.float32)),
        "actions": Array.of(np.arange(steps, dtype=np.int64)),
        "rewards": Array.of(np.zeros(steps, np.float32)),
        "dones": Array.of(np.zeros(steps, bool)),
    }
    return Trajectory(INP.task_id, INP.digest, steps, **{**arrays, **fields})


SPEC = {
    "observations": ArraySpec("float32", (2,)),
    "actions": ArraySpec("int64"),
    "rewards": ArraySpec("float32"),
    "dones": ArraySpec("bool"),
}


def test_trajectory_units_and_copy_key() -> None:
    assert traj(5).units == 5 and traj(MIN_COPY_UNITS - 1).content_key() is None
    assert traj(MIN_COPY_UNITS).content_key() == np.arange(MIN_COPY_UNITS, dtype="<i8").tobytes()


def test_trajectory_arrays_need_a_step_dimension() -> None:
    with pytest.raises(ValueError, match=r"^trajectory.values: first dimension \(\) is not steps=3$"):
        traj(3, values=Array("float32", (), b"\0" * 4))
    with pytest.raises(ValueError, match=r"^trajectory.values: first dimension \(4,\) is not steps=3$"):
        traj(3, values=Array.of(np.zeros((4, 2), np.float32)))
    assert traj(3, values=Array.of(np.zeros(3, np.float32))).values is not None


@pytest.mark.parametrize(
    "fields, spec, why",
    [
        ({}, SPEC, None),
        ({}, {**SPEC, "values": ArraySpec("float32")}, "values: missing"),
        ({"values": Array.of(np.zeros(3, np.float32))}, SPEC, "values: not declared by this game"),
        *(({}, {k: v for k, v in SPEC.items() if k != core}, None) for core in SPEC),  # core fields need no declaring
        ({}, {**SPEC, "observations": ArraySpec("float32", (3,))}, "observations: float32[2] per step, expected float32[3]"),
        ({}, {**SPEC, "rewards": ArraySpec("float64")}, "rewards: float32[] per step, expected float64[]"),
        ({"logprobs": Array.of(np.zeros(3, np.float32))}, {**SPEC, "logprobs": ArraySpec("float32")}, None),
    ],
)
def test_trajectory_violations_name_the_first_field_off_spec(fields: dict[str, Array], spec: dict[str, ArraySpec], why: str | None) -> None:
    assert traj(3, **fields).violations(spec) == why


# --------------------------------------------------------------------------- identity
SEED = bytes(range(32))
PEER = "12D3KooWA4Xop1JaT3MHxwYMkCepYsv4iPVopMXwCz5iHYdBfeSB"  # libp2p's id for this key


def test_peer_id_is_the_libp2p_form_of_the_public_key() -> None:
    me = Identity.from_seed(SEED)
    assert me.peer_id == PEER == peer_id_of(me.public_key)
    assert public_key_of(PEER) == me.public_key
    assert Identity.from_bytes(me.to_bytes()).peer_id == PEER


@pytest.mark.parametrize("data, text", [(b"", ""), (b"\0\0abc", "11ZiCa"), (b"\0", "1"), (b"\xff" * 4, "7YXq9G")])
def test_base58_round_trips_leading_zeros(data: bytes, text: str) -> None:
    assert b58encode(data) == text and b58decode(text) == data


def test_base58_refuses_other_alphabets_and_long_text() -> None:
    with pytest.raises(ValueError, match="^'0' is not base58$"):
        b58decode("10")
    assert b58decode("2" * 64)
    with pytest.raises(ValueError, match=r"^base58 text of 65 chars \(at most 64\)$"):
        b58decode("2" * 65)
    assert b58decode("2" * 65, max_chars=65)


@pytest.mark.parametrize("peer", ["peer-0", "", b58encode(b"\0\x24\x08\x01\x12\x20" + b"k" * 31), b58encode(b"\0\x24\x08\x02\x12\x20" + b"k" * 32)])
def test_ids_that_embed_no_ed25519_key(peer: str) -> None:
    assert public_key_of(peer) is None
    assert not verify(peer, b"m", b"s" * 64)


def test_signatures_verify_only_for_the_signer_and_message() -> None:
    me, other = Identity.from_seed(SEED), Identity.generate()
    signature = me.sign(b"message")
    assert verify(PEER, b"message", signature) and verify_key(me.public_key, b"message", signature)
    assert not verify(PEER, b"another", signature) and not verify(other.peer_id, b"message", signature)
    assert not verify_key(me.public_key[:31], b"message", signature)
    assert not verify_key(me.public_key, b"message", signature[:63]) and not verify_key(me.public_key, b"message", bytearray(signature))  # type: ignore[arg-type]
    assert not verify_key(None, b"message", signature)


def test_bad_seeds_and_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="^an Ed25519 seed is 32 bytes$"):
        Identity.from_seed(b"x" * 31)
    with pytest.raises(ValueError, match="^an Ed25519 public key is 32 bytes$"):
        peer_id_of(b"x" * 33)


def test_identity_file_errors_say_what_the_file_is_and_what_to_do(tmp_path: Path) -> None:
    data = Identity.from_seed(SEED).to_bytes()
    assert len(data) == 68 and data.hex().startswith("08011240" + SEED.hex())
    with pytest.raises(
        IdentityError,
        match=r"^key.bin is not an Ed25519 identity \(3 bytes; expected 68 starting with 08011240\): point to the file this peer wrote, or to a new path$",
    ):
        Identity.from_bytes(b"abc", "key.bin")
    with pytest.raises(IdentityError, match="^identity is not an Ed25519"):
        Identity.from_bytes(b"\x08\x01\x12\x41" + data[4:])
    with pytest.raises(IdentityError, match="^identity is corrupt: its public half does not match its private half$"):
        Identity.from_bytes(data[:-1] + bytes([data[-1] ^ 1]))


def test_load_or_create_writes_an_owner_only_key_once_and_reads_it_back(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "key"
    made = Identity.load_or_create(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o400 and path.read_bytes() == made.to_bytes()
    assert Identity.load_or_create(tmp_path / "key").peer_id != made.peer_id  # a new key, in an existing directory
    assert Identity.load_or_create(str(path)).peer_id == made.peer_id
    path.chmod(0o600)
    path.write_bytes(b"junk")
    with pytest.raises(IdentityError, match=f"^identity file {path} is not an Ed25519 identity"):
        Identity.load_or_create(path)


def test_an_unreadable_identity_file_is_an_identity_error(tmp_path: Path) -> None:
    (tmp_path / "key").mkdir()  # a directory where the key should be
    with pytest.raises(IdentityError, match=f"^cannot read identity file {tmp_path / 'key'}: Is a directory$"):
        Identity.load_or_create(tmp_path / "key")


# --------------------------------------------------------------------------- game: the loop on one peer
def test_game_config_defaults() -> None:
    config = GameConfig()
    assert (config.num_stages, config.max_rounds, config.train_every, config.mode) == (1, 10, "round", "train")
    assert (config.eval_every, config.exchange_timeout, config.max_jump) == (0, 30.0, 10)


@pytest.mark.parametrize(
    "field, value, rule",
    [("eval_every", -1, ">= 0"), ("max_jump", -1, ">= 0"), ("num_stages", -3, ">= 1"), ("exchange_timeout", 1e7, "> 0 and finite")],
)
def test_game_config_names_the_bad_field(field: str, value: object, rule: str) -> None:
    with pytest.raises(ValueError, match=f"^{field} must be {rule}, got {value!r}$"):
        GameConfig(**{field: value})  # type: ignore[arg-type]


def test_game_config_boundaries_are_allowed() -> None:
    config = GameConfig(num_stages=1, max_rounds=0, eval_every=0, max_jump=0, exchange_timeout=9_999_999.0)
    assert config.max_rounds == 0


def solo(game: RecordingGame | None = None, learner: bool = True, **config: Any) -> tuple[GameManager, RecordingGame]:
    game = game or RecordingGame([])
    return GameManager(game, game, game, game if learner else None, NullBackend("me"), LocalCoordinator(), GameConfig(**config)), game


def test_zero_rounds_plays_nothing_and_still_ends_the_game() -> None:
    manager, game = solo(max_rounds=0)
    ended: list[int] = []
    manager.hooks.after_game.append(lambda m, results: ended.append(len(results)))
    assert manager.run() == [] and ended == [0] and game.log == []


class SeesState(RecordingGame):
    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        self.log.append(f"trained on r{state.round} {state.stages} with r{rewards.round}")
        return super().train(state, rewards)


@pytest.mark.parametrize(
    "train_every, trained",
    [
        ("round", ["r0 [0, 1] with r0", "r1 [0, 1] with r1"]),
        ("stage", ["r0 [0] with r0", "r0 [0, 1] with r0", "r1 [0] with r1", "r1 [0, 1] with r1"]),
    ],
)
def test_a_finished_run_is_not_interrupted_and_hooks_and_learner_get_the_rounds_state(train_every: str, trained: list[str]) -> None:
    manager, game = solo(SeesState([]), max_rounds=2, num_stages=2, train_every=train_every)
    seen: list[tuple[bool, str, int, int, int]] = []
    manager.hooks.after_rewards.append(lambda m, st, rw: seen.append((m is manager, st.peer_id, st.round, rw.round, len(rw.scored))))
    assert len(manager.run()) == 2 and manager.interrupted is False
    assert seen == [(True, "me", 0, 0, 4), (True, "me", 1, 1, 4)]
    assert [line.removeprefix("trained on ") for line in game.log if line.startswith("trained")] == trained


def test_this_peers_own_scoring_bug_stops_the_run() -> None:
    game = Picky([])
    game.act = lambda inputs, stage, greedy=False: [echo(i, "a", "short") for i in inputs]  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="^Picky.score gave 1 rewards for 2 samples$"):
        solo(game, max_rounds=1)[0].run()


def test_a_peer_without_a_learner_plays_and_never_trains() -> None:
    manager, game = solo(learner=False, max_rounds=2)
    results = manager.run()
    assert [r.round for r in results] == [0, 1] and game.trained == [] and game.version == 0
    assert not any(k.startswith(("loss", "time/train")) for r in results for k in r.metrics)


def test_per_stage_training_names_its_metrics_by_stage() -> None:
    manager, _ = solo(max_rounds=1, num_stages=2, train_every="stage")
    (result,) = manager.run()
    assert {"loss_s0", "loss_s1", "time/train_s0", "time/train_s1"} <= result.metrics.keys()
    assert "loss" not in result.metrics and 0 <= result.metrics["time/train_s0"] < 60


def test_round_metrics_count_peers_and_refusals_per_stage() -> None:
    manager, game = solo(max_rounds=1, num_stages=2)
    game.check = lambda body, inp: "no" if inp.stage == 1 else None  # type: ignore[method-assign]
    (result,) = manager.run()
    assert {k: result.metrics[k] for k in ("swarm/peers_s0", "swarm/refused_s0", "swarm/peers_s1", "swarm/refused_s1")} == {
        "swarm/peers_s0": 1, "swarm/refused_s0": 0, "swarm/peers_s1": 1, "swarm/refused_s1": 2,
    }  # fmt: skip
    assert result.dropped == {"me": 2}  # this peer's own refusals are counted, never quarantined
    assert result.metrics["trust/quarantined"] == 0 and "trust/dropped_refused" not in result.metrics


class WithEval(RecordingGame):
    def eval_tasks(self) -> list[Any]:
        return [Task.create("e1", answer="a"), Task.create("e2", answer="a"), Task.create("e3", answer="b")]

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        self.log.append(f"act s{stage} greedy={greedy}")
        self.eval_inputs = list(inputs)
        return [echo(i, "a", "a", "b") for i in inputs]

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        self.scored_eval = [*getattr(self, "scored_eval", []), rollout]
        return super().score(task, input, rollout)


def test_evaluate_is_the_mean_reward_of_greedy_actions_over_every_sample() -> None:
    manager, game = solo(WithEval([]), mode="evaluate", max_rounds=5)
    manager.start_round = 4
    (result,) = manager.run()
    assert (result.round, result.peer_id, result.rewards, result.winners) == (4, "me", {}, ())
    assert result.metrics == {"eval/reward": pytest.approx(5 / 9)}  # 2 + 2 + 1 of 9 samples
    assert game.log == ["act s0 greedy=True"]
    assert [(r.peer_id, r.round, r.stage, r.texts) for r in game.scored_eval] == [("eval", 0, 0, ("a", "a", "b"))] * 3
    assert [(i.stage, r.stage) for i, r in zip(game.eval_inputs, game.scored_eval)] == [(0, 0)] * 3


def test_evaluate_over_one_sample_is_that_samples_reward() -> None:
    game = WithEval([])
    game.eval_tasks = lambda: [Task.create("e", answer="a")]  # type: ignore[method-assign]
    game.act = lambda inputs, stage, greedy=False: [echo(i, "a") for i in inputs]  # type: ignore[method-assign]
    assert solo(game)[0].evaluate() == {"eval/reward": 1.0}
    game.eval_tasks = list  # type: ignore[method-assign]
    assert solo(game)[0].evaluate() == {}


def test_evaluation_runs_on_the_last_round_and_every_eval_every_rounds_only_in_train_and_evaluate() -> None:
    runs = {}
    for mode, every in (("train", 1), ("train_and_evaluate", 0), ("train_and_evaluate", 3), ("train_and_evaluate", 1)):
        manager, _ = solo(WithEval([]), mode=mode, max_rounds=7, eval_every=every)
        runs[(mode, every)] = [r.round for r in manager.run() if "eval/reward" in r.metrics]
    assert runs == {
        ("train", 1): [], ("train_and_evaluate", 0): [6], ("train_and_evaluate", 3): [2, 5, 6], ("train_and_evaluate", 1): list(range(7)),
    }  # fmt: skip


def test_an_evaluation_round_keeps_its_training_and_swarm_metrics() -> None:
    manager, _ = solo(WithEval([]), mode="train_and_evaluate", max_rounds=1)
    (result,) = manager.run()
    assert {"eval/reward", "loss", "time/train", "swarm/peers_s0", "trust/quarantined"} <= result.metrics.keys()


class Ahead(NullBackend):
    """A transport that says the swarm plays ``round``."""

    def __init__(self, round: int) -> None:
        super().__init__("me")
        self.round = round

    def swarm_round(self) -> int:
        return self.round


@pytest.mark.parametrize("told, max_jump, played", [(3, 10, [3, 4, 5]), (3, 2, [2, 3, 4, 5]), (9, 0, [0, 1, 2, 3, 4, 5]), (1, 10, [1, 2, 3, 4, 5])])
def test_the_transports_word_moves_a_peer_at_most_max_jump_rounds(told: int, max_jump: int, played: list[int]) -> None:
    game = RecordingGame([])
    manager = GameManager(game, game, game, game, Ahead(told), LocalCoordinator(), GameConfig(max_rounds=6, max_jump=max_jump))
    assert [r.round for r in manager.run()] == played


def test_a_jump_is_logged_once_and_a_peer_in_step_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    game, comm = RecordingGame([]), Ahead(3)
    hooks = Hooks(after_round=[lambda m, res: setattr(comm, "round", res.round + 2 if res.round == 5 else res.round + 1)])
    manager = GameManager(game, game, game, game, comm, LocalCoordinator(), GameConfig(max_rounds=6), hooks)
    with caplog.at_level("WARNING"):
        assert [r.round for r in manager.run()] == [3, 4, 5]  # after round 5 the swarm is at 7: the run is over
    assert caplog.messages == ["me is behind the swarm: jumps from round 0 to 3, skipping rounds 0-2"]


def test_the_coordinators_round_is_trusted_beyond_max_jump() -> None:
    game, coordinator = RecordingGame([]), LocalCoordinator()
    coordinator.finish_round(4)
    manager = GameManager(game, game, game, game, Ahead(0), coordinator, GameConfig(max_rounds=7, max_jump=1))
    assert [r.round for r in manager.run()] == [5, 6]


def test_a_swarm_past_the_last_round_ends_the_run() -> None:
    game = RecordingGame([])
    manager = GameManager(game, game, game, game, Ahead(50), LocalCoordinator(), GameConfig(max_rounds=3, max_jump=100))
    assert manager.run() == []


def test_no_inputs_means_no_act_call() -> None:
    manager, game = solo(RecordingGame([], tasks=0), max_rounds=1)
    (result,) = manager.run()
    assert not any(line.startswith("act") for line in game.log) and result.rewards == {}


def test_an_interrupt_inside_act_ends_the_run_with_the_rounds_played() -> None:
    manager, game = solo(max_rounds=5)
    ended: list[list[int]] = []
    manager.hooks.after_game.append(lambda m, results: ended.append([r.round for r in results]))
    act = game.act

    def act_until_round_2(inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        if inputs and inputs[0].prompt.startswith("q2"):
            raise RunInterrupted
        return act(inputs, stage, greedy)

    game.act = act_until_round_2  # type: ignore[method-assign]
    assert [r.round for r in manager.run()] == [0, 1] and manager.interrupted and ended == [[0, 1]]


def test_stop_interrupts_the_policy_and_the_transport() -> None:
    calls: list[str] = []
    manager, game = solo(max_rounds=5)
    game.interrupt = lambda: calls.append("policy")  # type: ignore[method-assign]
    manager.comm.interrupt = lambda: calls.append("comm")  # type: ignore[method-assign]
    manager.stop()
    assert calls == ["policy", "comm"] and manager.run() == [] and manager.interrupted


def test_each_round_is_reported_then_finished_then_hooked() -> None:
    order: list[str] = []

    class Referee(LocalCoordinator):
        def report(self, result: RoundResult) -> None:
            order.append(f"report r{result.round}")
            super().report(result)

        def finish_round(self, round: int) -> None:
            order.append(f"finish r{round}")
            super().finish_round(round)

    game = RecordingGame([])
    hooks = Hooks(after_round=[lambda m, res: order.append(f"hook r{res.round}")])
    GameManager(game, game, game, game, NullBackend("me"), Referee(settle_wait=0), GameConfig(max_rounds=2), hooks).run()
    assert order == ["report r0", "finish r0", "hook r0", "report r1", "finish r1", "hook r1"]


def test_a_learner_acts_with_the_policy_it_trains_unless_it_says_otherwise() -> None:
    """The launcher asks the learner which policy the game acts with; by default, the same one."""
    game, other = RecordingGame([]), RecordingGame([])
    assert game.acting_policy(other) is other
