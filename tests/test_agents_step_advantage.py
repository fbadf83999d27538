"""Step-level advantages (GiGPO's anchor states) against hand-computed values on hand-built
episodes; the agent learner trains in each mode; its selection is the shared SAPO draw."""

from __future__ import annotations

import copy

import pytest

from genrl_swarm.core import GameState, Rollout, RoundRewards, ScoredRollout, Task
from genrl_swarm.paradigms.agents.bodies import Episode, Turn
from genrl_swarm.paradigms.agents.step_advantage import Advantage, anchor_keys, combine, returns_to_go, step_advantages

EPS = 1e-4


def turns(*spec: tuple[str, list[int]]) -> tuple[Turn, ...]:
    return tuple(Turn(role, tuple(ids), (-1.0,) * len(ids) if role == "assistant" else ()) for role, ids in spec)  # type: ignore[arg-type]


U, T5, T7, T6 = ("user", [1, 2]), ("tool", [5]), ("tool", [7]), ("tool", [6])
# One task, four episodes (discount 0.5, rewards 1, 1, 0, 0):
#   E1: prompt, a, tool 5, a              -> 1    E2: prompt, a, tool 5, a, tool 6, a -> 1
#   E3: prompt, a, tool 7, a              -> 0    E4: prompt, a                       -> 0
E1 = turns(U, ("assistant", [10]), T5, ("assistant", [11]))
E2 = turns(U, ("assistant", [12, 3]), T5, ("assistant", [13]), T6, ("assistant", [14]))
E3 = turns(U, ("assistant", [15]), T7, ("assistant", [16]))
E4 = turns(U, ("assistant", [17, 4, 4]))
EPISODES, REWARDS = (E1, E2, E3, E4), (1.0, 1.0, 0.0, 0.0)


def test_anchor_states_are_the_observation_history() -> None:
    k1, k2, k3, k4 = (anchor_keys(e) for e in EPISODES)
    assert len(k1) == 2 and len(k2) == 3 and len(k3) == 2 and len(k4) == 1
    assert k1[0] == k2[0] == k3[0] == k4[0]  # the prompt: one state, whatever the model then wrote
    assert k1[1] == k2[1]  # different model text, same tool answer: the same state
    assert k1[1] != k3[1]  # another tool answer: another state
    assert len({k2[2], k1[1], k3[1], k1[0]}) == 4
    # A longer id sequence is not confused with two shorter ones (length-prefixed).
    assert anchor_keys(turns(("user", [1]), ("tool", [2]), ("assistant", [9]))) != anchor_keys(turns(("user", [1, 2]), ("assistant", [9])))


def test_step_advantages_by_hand() -> None:
    returns = [r for e, reward in zip(EPISODES, REWARDS) for r in returns_to_go(reward, len(anchor_keys(e)), 0.5)]
    assert returns == [0.5, 1.0, 0.25, 0.5, 1.0, 0.0, 0.0, 0.0]
    states = [k for e in EPISODES for k in anchor_keys(e)]
    got = step_advantages(returns, states)
    # The prompt's group: returns [0.5, 0.25, 0, 0], mean 0.1875, population std sqrt(0.04296875).
    s0 = 0.04296875**0.5
    # After tool 5: E1's 1.0 against E2's 0.5 (mean 0.75, std 0.25). Alone in their state: E3 t1, E2 t2.
    want = [0.3125 / (s0 + EPS), 0.25 / (0.25 + EPS), 0.0625 / (s0 + EPS), -0.25 / (0.25 + EPS), 0.0, -0.1875 / (s0 + EPS), 0.0, -0.1875 / (s0 + EPS)]
    assert got == pytest.approx(want, abs=1e-9)
    assert got[0] == pytest.approx(1.50689, abs=1e-4) and got[1] == pytest.approx(0.9996, abs=1e-4)
    assert step_advantages(returns, states, scale=False)[:2] == pytest.approx([0.3125, 0.25])
    # GiGPO's sum, weight 0.5, with the episode term +-1 (rewards [1, 1, 0, 0]).
    episode = [1.0, 1.0, 1.0, 1.0, 1.0, -1.0, -1.0, -1.0]
    both = combine(episode, got, Advantage.BOTH, 0.5)
    assert both == pytest.approx([e + 0.5 * s for e, s in zip(episode, want)])
    assert both[3] == pytest.approx(1.0 - 0.5 * 0.25 / (0.25 + EPS))  # E2's slower second turn: less credit than E1's
    assert combine(episode, got, Advantage.EPISODE, 0.5) == episode and combine(episode, got, Advantage.STEP, 0.5) == got


# --------------------------------------------------------------------------- the learner
torch = pytest.importorskip("torch")

from genrl_swarm.paradigms.agents.learner import AgentLearner  # noqa: E402
from genrl_swarm.paradigms.lm.policy import LMPolicy  # noqa: E402


@pytest.fixture(scope="module")
def policy() -> LMPolicy:
    return LMPolicy("tiny-random", {"max_new_tokens": 4})


def task(group: str) -> Task:
    return Task(f"t-{group}", "p", metadata={"task": "calc", "group": group})


def episode(spec: tuple[Turn, ...], group: str = "A") -> Episode:
    return Episode(f"t-{group}", "0" * 24, spec, "answer", 0, "tiny")


def by_id(*groups: str) -> dict[str, Task]:
    return {f"t-{g}": task(g) for g in groups}


def test_learner_turn_advantages_match_the_hand_values(policy: LMPolicy) -> None:
    chosen = [ScoredRollout(Rollout("me", 0, 0, episode(e)), (r,)) for e, r in zip(EPISODES, REWARDS)]
    tasks = by_id("A")
    s0 = 0.04296875**0.5
    step = [
        [0.3125 / (s0 + EPS), 0.25 / (0.25 + EPS)],
        [0.0625 / (s0 + EPS), -0.25 / (0.25 + EPS), 0.0],
        [-0.1875 / (s0 + EPS), 0.0],
        [-0.1875 / (s0 + EPS)],
    ]
    ep = [0.5 / (0.5 + EPS)] * 2 + [-0.5 / (0.5 + EPS)] * 2  # group std 0.5
    for mode, want in (
        ("episode", [[a] * len(s) for a, s in zip(ep, step)]),
        ("step", step),
        ("both", [[a + 2.0 * x for x in s] for a, s in zip(ep, step)]),
    ):
        learner = AgentLearner(policy, normalize="group", advantage=mode, step_weight=2.0, step_discount=0.5)
        got = learner.turn_advantages(chosen, tasks)
        assert [g for row in got for g in row] == pytest.approx([w for row in want for w in row], abs=1e-9), mode


def test_bad_advantage_settings_are_one_line_errors(policy: LMPolicy) -> None:
    with pytest.raises(ValueError, match="advantage must be episode, step or both, got 'turn'"):
        AgentLearner(policy, advantage="turn")
    with pytest.raises(ValueError, match="step_discount must be in"):
        AgentLearner(policy, advantage="both", step_discount=0.0)
    assert AgentLearner(policy, advantage=Advantage.BOTH).advantage is Advantage.BOTH


@pytest.mark.parametrize("mode", ["episode", "step", "both"])
def test_the_learner_trains_in_each_mode(policy: LMPolicy, mode: str) -> None:
    """One train step on the hand-built round: weights move; ``step`` and ``both`` train one row
    per model turn (8), ``episode`` one per episode (4)."""
    chosen = tuple(ScoredRollout(Rollout("me", 0, 0, episode(e)), (r,)) for e, r in zip(EPISODES, REWARDS))
    state = GameState(0, "me", by_id("A"))
    saved = copy.deepcopy(policy.model.state_dict())
    try:
        learner = AgentLearner(policy, {"learning_rate": 1e-3, "micro_batch_size": 3}, normalize="group", advantage=mode)
        metrics = learner.train(state, RoundRewards(0, chosen))
        moved = any(not torch.equal(saved[k], v) for k, v in policy.model.state_dict().items())
    finally:
        policy.model.load_state_dict(saved)
    assert moved and metrics["train/sequences"] == (4 if mode == "episode" else 8)
    assert torch.isfinite(torch.tensor(metrics["train/loss"]))


def test_turn_samples_are_the_model_turns_with_their_context(policy: LMPolicy) -> None:
    learner = AgentLearner(policy, normalize="group", advantage="step")
    chosen = [ScoredRollout(Rollout("me", 0, 0, episode(e)), (r,)) for e, r in zip(EPISODES, REWARDS)]
    rows = learner.samples(GameState(0, "me", by_id("A")), chosen)
    e2 = [r for r in rows if r.prompt_ids[:2] == [1, 2] and len(r.prompt_ids) >= 2 and r.completion_ids in ([12, 3], [13], [14])]
    assert [(list(r.prompt_ids), list(r.completion_ids)) for r in e2] == [
        ([1, 2], [12, 3]),
        ([1, 2, 12, 3, 5], [13]),
        ([1, 2, 12, 3, 5, 13, 6], [14]),
    ]
    assert all(list(r.logprobs) == [-1.0] * len(r.completion_ids) and not r.swarm for r in rows)


# --------------------------------------------------------------------------- selection
def test_select_is_the_shared_sapo_draw_with_the_sender_cap(policy: LMPolicy) -> None:
    """An episode of the swarm is drawn when its task group teaches; senders take turns and
    ``max_external_per_sender`` caps one. The old copy drew uniformly: a flooder's 20 episodes
    took most of the external share."""
    own = [ScoredRollout(Rollout("me", 0, 0, episode(e)), (r,)) for e, r in zip(EPISODES, REWARDS)]
    flood = [ScoredRollout(Rollout("flooder", 0, 0, episode(EPISODES[i % 4])), (float(i % 2),)) for i in range(20)]
    honest = [ScoredRollout(Rollout(f"h{i}", 0, 0, episode(EPISODES[i])), (REWARDS[i],)) for i in range(3)]
    # A second task whose episodes all scored alike teaches nothing (episode mode): never drawn.
    flat_ep = episode(turns(("user", [9, 9]), ("assistant", [3])), "B")
    flat = [ScoredRollout(Rollout(f"f{i}", 0, 0, flat_ep), (1.0,)) for i in range(4)]
    state = GameState(0, "me", by_id("A", "B"))
    for seed in range(5):
        learner = AgentLearner(policy, {"num_external": 6, "max_external_per_sender": 2}, seed=seed)
        chosen = learner.select(state, RoundRewards(0, tuple(own + flood + honest + flat)))
        external = [s for s in chosen if s.rollout.peer_id != "me"]
        assert chosen[:4] == own and len(external) == 5  # 2 from the flooder, 1 from each honest sender
        assert sum(s.rollout.peer_id == "flooder" for s in external) == 2
        assert not any(s.rollout.peer_id.startswith("f") and s.rollout.peer_id != "flooder" for s in external)


def test_sybil_ids_sending_poor_episodes_do_not_crowd_out_a_better_one(policy: LMPolicy) -> None:
    """Competing swarm episodes are ranked by their gain over this peer's own mean for the task
    group (``swarm_value.gains`` by task group), so 9 ids each sending a legal, informative, zero-reward episode get
    no slot the honest sender's better episode could take. With senders taking turns the honest
    episode was drawn in about 2 of 10 draws."""
    own = [ScoredRollout(Rollout("me", 0, 0, episode(e)), (r,)) for e, r in zip(EPISODES, REWARDS)]  # mean 0.5
    sybils = [ScoredRollout(Rollout(f"sybil-{i}", 0, 0, episode(EPISODES[2])), (0.0,)) for i in range(9)]
    honest = ScoredRollout(Rollout("honest", 0, 0, episode(EPISODES[1])), (1.0,))
    state = GameState(0, "me", by_id("A"))
    for seed in range(20):
        learner = AgentLearner(policy, {"num_external": 2}, seed=seed)
        chosen = learner.select(state, RoundRewards(0, tuple(own + sybils + [honest])))
        assert honest in chosen[len(own) :], seed


def test_swarm_rows_get_the_swarm_cap(policy: LMPolicy) -> None:
    """Rows from another peer's episode are marked ``swarm`` (their claimed log-probs capped)."""
    mine = [ScoredRollout(Rollout("me", 0, 0, episode(e)), (r,)) for e, r in zip(EPISODES[:2], REWARDS[:2])]
    theirs = [ScoredRollout(Rollout("peer", 0, 0, episode(e)), (r,)) for e, r in zip(EPISODES[2:], REWARDS[2:])]
    learner = AgentLearner(policy, normalize="group")
    rows = learner.samples(GameState(0, "me", by_id("A")), mine + theirs)
    assert [r.swarm for r in rows] == [False, False, True, True]
