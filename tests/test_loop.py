"""The loop's order, hooks, training modes, run modes and catch-up."""

from __future__ import annotations

import threading

import pytest

from genrl_swarm.comm import InMemoryBackend, NullBackend
from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.core import GameConfig, GameManager, Hooks

from helpers import RecordingGame, echo


def manager(log: list[str], **config: object) -> tuple[GameManager, RecordingGame]:
    game = RecordingGame(log)
    hooks = Hooks(
        after_stage=[lambda m, st, s, ex: log.append(f"after_stage s{s} {ex.summary()}")],
        after_rewards=[lambda m, st, rw: log.append(f"after_rewards {len(rw.scored)}")],
        after_round=[lambda m, res: log.append(f"after_round r{res.round}")],
        after_game=[lambda m, results: log.append(f"after_game {len(results)}")],
    )
    cfg = GameConfig(**config)  # type: ignore[arg-type]
    return GameManager(game, game, game, game, NullBackend(), LocalCoordinator(), cfg, hooks), game


def test_round_order_and_hooks() -> None:
    log: list[str] = []
    m, _ = manager(log, num_stages=2, max_rounds=1)
    m.run()
    assert log == [
        "tasks r0",
        "inputs s0",
        "act s0",
        "after_stage s0 got 1 of 1",
        "inputs s1",
        "act s1",
        "after_stage s1 got 1 of 1",
        "after_rewards 4",  # 2 tasks x 2 stages, own rollouts
        "train s0,s1",
        "after_round r0",
        "after_game 1",
    ]


def test_per_stage_training_sees_only_that_stage() -> None:
    log: list[str] = []
    m, game = manager(log, num_stages=3, max_rounds=2, train_every="stage")
    m.run()
    assert [line for line in log if line.startswith("train")] == ["train s0", "train s1", "train s2"] * 2
    assert log.index("train s0") < log.index("inputs s1")  # trained before the next stage is played
    assert all(len(rw.scored) == 2 for rw in game.trained)


def test_per_round_training_trains_once_per_round() -> None:
    log: list[str] = []
    m, game = manager(log, num_stages=3, max_rounds=2, train_every="round")
    m.run()
    assert [line for line in log if line.startswith("train")] == ["train s0,s1,s2"] * 2


def test_round_result_has_local_rewards_and_timings() -> None:
    m, _ = manager([], num_stages=1, max_rounds=1)
    (result,) = m.run()
    assert result.rewards == {"peer-0": 0.5}  # one of two completions matches
    assert result.winners == ("peer-0",)
    assert {"time/generate_s0", "time/exchange_s0", "time/train", "loss"} <= result.metrics.keys()


def test_evaluate_mode_plays_no_round() -> None:
    log: list[str] = []
    m, _ = manager(log, mode="evaluate", max_rounds=5)
    (result,) = m.run()
    assert not any(line.startswith("tasks") for line in log)
    assert result.metrics == {}  # RecordingGame has no eval split


def test_train_and_evaluate_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    m, _ = manager([], mode="train_and_evaluate", max_rounds=5, eval_every=2)
    calls: list[int] = []
    monkeypatch.setattr(m, "evaluate", lambda: calls.append(1) or {"eval/reward": 1.0})
    results = m.run()
    assert ["eval/reward" in r.metrics for r in results] == [False, True, False, True, True]


def test_peer_behind_catches_up_to_coordinator_round() -> None:
    log: list[str] = []
    m, _ = manager(log, max_rounds=6)
    m.coordinator.finish_round(3)  # the swarm is already past round 3
    results = m.run()
    assert [r.round for r in results] == [4, 5]


def test_act_must_answer_every_input() -> None:
    m, game = manager([], max_rounds=1)
    game.act = lambda inputs, stage, greedy=False: [echo(inputs[0], "a")]  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="1 bodies for 2 inputs"):
        m.run()


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("num_stages", 0, ">= 1"),
        ("max_rounds", -1, ">= 0"),
        ("exchange_timeout", 0, "> 0 and finite"),
        ("exchange_timeout", float("inf"), "> 0 and finite"),
    ],
)
def test_bad_game_config_names_the_field(field: str, value: object, rule: str) -> None:
    with pytest.raises(ValueError, match=f"^{field} must be {rule}, got {value}$"):
        GameConfig(**{field: value})  # type: ignore[arg-type]


def test_policy_never_sees_the_ground_truth() -> None:
    m, game = manager([], num_stages=2, max_rounds=1)
    m.run()
    assert game.seen_inputs and all("secret" not in i.context and i.prompt != "a" for i in game.seen_inputs)
    assert all(not hasattr(i, "answer") for i in game.seen_inputs)


def test_learner_weights_reach_the_policy_and_version_counts_updates() -> None:
    m, game = manager([], max_rounds=3)
    loaded: list[int] = []
    game.load_weights = lambda w: loaded.append(w.version)  # type: ignore[method-assign]
    m.run()
    assert loaded == [1, 2, 3]


def test_catch_up_jump_is_logged_with_the_rounds_skipped(caplog: pytest.LogCaptureFixture) -> None:
    m, _ = manager([], max_rounds=10)
    m.coordinator.finish_round(6)
    with caplog.at_level("WARNING"):
        results = m.run()
    assert [r.round for r in results] == [7, 8, 9]
    assert "jumps from round 0 to 7, skipping rounds 0-6" in caplog.text


def test_stop_from_another_thread_ends_the_run_between_rounds() -> None:
    m, game = manager([], max_rounds=10_000)
    m.hooks.after_round.append(lambda mgr, res: mgr.stop() if res.round == 2 else None)
    results = m.run()
    assert [r.round for r in results] == [0, 1, 2] and m.interrupted


def test_every_peer_sees_every_peer_each_stage() -> None:
    comms = InMemoryBackend.spawn(3)
    seen: list[tuple[str, int, list[str]]] = []
    coordinator = LocalCoordinator()

    def play(comm: InMemoryBackend) -> None:
        game = RecordingGame([])
        hooks = Hooks(after_stage=[lambda m, st, s, ex: seen.append((m.peer_id, s, st.peers(s)))])
        GameManager(game, game, game, game, comm, coordinator, GameConfig(num_stages=2, max_rounds=2), hooks).run()

    threads = [threading.Thread(target=play, args=(c,)) for c in comms]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(seen) == 3 * 2 * 2
    assert all(peers == ["peer-0", "peer-1", "peer-2"] for _, _, peers in seen)
    assert coordinator.current_round() == 2
