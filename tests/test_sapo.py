"""SAPO as published: each peer its own questions (rebuilt exactly by a receiver), specialties,
and the external draw that filters uninformative groups first with senders taking turns."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from genrl_swarm.core import GameState, Rollout, ScoredRollout, StageInput
from genrl_swarm.core.admission import admit
from genrl_swarm.core.bodies import Body
from genrl_swarm.data.digits import DigitArithmeticData
from genrl_swarm.data.reasoning_gym import ReasoningGymData
from genrl_swarm.paradigms.lm.selection import draw_external, sapo_select

pytestmark = pytest.mark.slow  # LM training


class Answer(Body, frozen=True, tag="sapo-answer"):
    text: str


def answer(i: StageInput, text: str = "1") -> Answer:
    return Answer(i.task_id, i.digest, text)


def test_per_peer_questions_differ_between_peers_and_a_receiver_rebuilds_them_exactly() -> None:
    for data in (ReasoningGymData(questions="per_peer", seed=3, eval_size=1), DigitArithmeticData(questions="per_peer", seed=3)):
        mine, theirs = data.tasks_for(5, "peer-a"), data.tasks_for(5, "peer-b")
        assert {t.id for t in mine}.isdisjoint({t.id for t in theirs})
        rebuilt = type(data)(questions="per_peer", seed=3, **({"eval_size": 1} if isinstance(data, ReasoningGymData) else {})).tasks_for(5, "peer-b")
        assert [(t.id, t.answer) for t in rebuilt] == [(t.id, t.answer) for t in theirs]  # truth included
        assert data.tasks_for(6, "peer-a") != mine
    shared = ReasoningGymData(seed=3, eval_size=1)
    assert [t.id for t in shared.tasks_for(5, "peer-a")] == [t.id for t in shared.tasks_for(5, "peer-b")] == [t.id for t in shared.round_tasks(5)]


def test_a_receiver_scores_a_sender_on_the_senders_own_questions_and_refuses_any_other() -> None:
    data = DigitArithmeticData(questions="per_peer", seed=1)
    state = GameState(0, "me")
    state.set_tasks(data.tasks_for(0, "me"))
    mine = [t.input(0) for t in state.tasks.values()]
    theirs = [t.input(0) for t in data.tasks_for(0, "them")]
    elsewhere = [t.input(0) for t in data.tasks_for(0, "someone-else")]
    drops = admit(
        state, 0, mine, {"me": [answer(i) for i in mine], "them": [answer(theirs[0]), answer(elsewhere[1])]}, tasks_of=lambda p: data.tasks_for(0, p)
    )
    assert [(d.peer_id, d.task_id, d.kind) for d in drops] == [("them", elsewhere[1].task_id, "refused")]
    (kept,) = state.select(peer="them")
    assert state.tasks[kept.task_id].answer == data.tasks_for(0, "them")[0].answer  # local truth, rebuilt
    assert state.input_for(kept).digest == theirs[0].digest
    # without per-peer questions the same body answers a task this peer never had: refused
    shared = GameState(0, "me")
    shared.set_tasks(data.tasks_for(0, "me"))
    assert [d.kind for d in admit(shared, 0, mine, {"them": [answer(theirs[0])]})] == ["refused"]


def test_specialties_give_each_peer_its_own_datasets() -> None:
    data = ReasoningGymData(
        ["basic_arithmetic", "bf", "arc_1d"], questions="per_peer", peer_weights={"p0": {"bf": 1.0}}, specialties=1, seed=2, eval_size=1
    )
    assert {t.metadata["dataset"] for t in data.tasks_for(0, "p0")} == {"bf"}
    others = {p: {t.metadata["dataset"] for r in range(3) for t in data.tasks_for(r, p)} for p in ("p1", "p2", "p3")}
    assert all(len(d) == 1 for d in others.values())  # one specialty each, picked from the id
    assert {t.metadata["dataset"] for t in data.eval_tasks()} == {"basic_arithmetic", "bf", "arc_1d"}  # evaluated on all
    with pytest.raises(ValueError, match="unknown"):
        ReasoningGymData(["bf"], peer_weights={"p0": {"basic_arithmetic": 1.0}}, eval_size=0)
    with pytest.raises(ValueError, match="questions"):
        ReasoningGymData(["bf"], questions="each", eval_size=0)


def group(peer: str, rewards: tuple[float, ...], i: int) -> ScoredRollout:
    return ScoredRollout(Rollout(peer, 0, 0, Answer(f"t{peer}{i}", "d", "x"), ()), rewards)


def test_the_external_draw_never_takes_a_zero_advantage_group_while_an_informative_one_is_left() -> None:
    rng = random.Random(0)
    for trial in range(200):
        flat = [group(f"s{k}", (0.5, 0.5), i) for k in range(3) for i in range(rng.randint(0, 6))]
        useful = [group(f"s{k}", (0.0, 1.0), 100 + i) for k in range(3) for i in range(rng.randint(0, 3))]
        drawn = draw_external(rng.sample(flat + useful, len(flat) + len(useful)), 4, random.Random(trial))
        assert len(drawn) == min(4, len(useful)) and all(g in useful for g in drawn)


def test_one_sender_gets_at_most_its_fair_share_while_others_have_groups() -> None:
    flood = [group("flooder", (0.0, 1.0), i) for i in range(50)]
    honest = [group(f"h{k}", (0.0, 1.0), i) for k in range(3) for i in range(2)]
    for seed in range(50):
        drawn = draw_external(flood + honest, 4, random.Random(seed))
        assert sum(g.rollout.peer_id == "flooder" for g in drawn) == 1  # ceil(4 / 4 senders)
    alone = draw_external(flood, 4, random.Random(0))
    assert len(alone) == 4  # no one else: the share is still filled
    own = [group("me", (0.0, 1.0), i) for i in range(6)]
    assert len(sapo_select(own, flood, 4, 4, random.Random(0))) == 8 and len(sapo_select(own, flood, -1, 0, random.Random(0))) == 6


def test_a_two_peer_swarm_on_per_peer_questions_scores_and_trains_on_each_others(tmp_path: Path) -> None:
    from genrl_swarm.config import load_recipe
    from genrl_swarm.run.launcher import build_managers, run_managers

    overrides = [
        f"run.dir={tmp_path / 'run'}", "run.tensorboard=false", "run.console=false", "run.plot=false", "run.checkpoint_every=0",
        "policy.model=tiny-random", "policy.sampling.max_new_tokens=8", "game.max_rounds=2", "game.mode=train",
        "data.tasks_per_round=2", "data.questions=per_peer",
    ]  # fmt: skip
    managers, _ = build_managers(load_recipe("reasoning_gym/digits", overrides))
    results = run_managers(managers)
    a, b = (m.peer_id for m in managers)
    for m in managers:
        for r in results[m.peer_id]:
            assert set(r.rewards) == {a, b} and not r.dropped  # each scored the other on the other's questions
    assert {t.id for t in managers[0].data.tasks_for(0, a)}.isdisjoint({t.id for t in managers[0].data.tasks_for(0, b)})


def test_the_papers_recipe_runs_two_rounds_on_the_tiny_model(tmp_path: Path) -> None:
    from genrl_swarm.config import load_recipe
    from genrl_swarm.run.launcher import build_managers, run_managers

    overrides = [f"run.dir={tmp_path / 'run'}", "run.tensorboard=false", "run.console=false", "run.plot=false", "run.checkpoint_every=0",
                 "policy.model=tiny-random", "policy.sampling.max_new_tokens=16", "game.max_rounds=2", "game.mode=train"]  # fmt: skip
    managers, _ = build_managers(load_recipe("reasoning_gym/sapo", overrides))
    assert len(managers) == 8 and managers[0].learner.cfg.num_external == 4 and managers[0].learner.cfg.beta == 0.0
    results = run_managers(managers)
    assert all([r.round for r in rows] == [0, 1] for rows in results.values())
    assert all(len(r.rewards) == 8 for rows in results.values() for r in rows)  # everyone scored everyone
