"""The simulator drives the protocol core: its choices are the core's, its verdicts keep every
forged or over-budget payload away from honest peers, and its costs follow the strategy."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from genrl_swarm.cli import main
from genrl_swarm.protocol import make_strategy
from genrl_swarm.sim import ChurnModel, NetModel, SimConfig, Simulation, simulate
from genrl_swarm.sim.population import FLOOD, FORGE, Population

CALM = NetModel(loss=0.0, nat_fraction=0.0)
STILL = ChurnModel(per_hour=0.0)


def test_who_receives_what_is_the_cores_plan() -> None:
    cfg = SimConfig(peers=6, rounds=3, strategy="pull_k", strategy_params={"k": 2}, net=CALM, churn=STILL)
    sim = Simulation(cfg)
    sim.run()
    ids = [f"p{i:05d}" for i in range(6)]
    strategy = make_strategy("pull_k", k=2)
    for round, outcome in enumerate(sim.outcomes):
        expected = {me: frozenset(strategy.plan("sim", me, round, 0, ids, skip=()).candidates) for me in ids}
        assert outcome.received == expected


def test_unreachable_peers_are_never_waited_for() -> None:
    cfg = SimConfig(peers=60, rounds=4, strategy="pull_k", strategy_params={"k": 3}, net=replace(CALM, nat_fraction=0.5), churn=STILL)
    sim = Simulation(cfg)
    summary = sim.run()
    pop = Population(cfg, np.random.default_rng(cfg.seed))  # the same draw of links and NATs
    natted = {pop.ids[i] for i in np.flatnonzero(pop.nat)}
    assert natted and all(not (senders & natted) for o in sim.outcomes for senders in o.received.values())
    assert summary.received == 1.0 and summary.exchange_p95 < 0.5 * cfg.timeout_s


def test_hostile_peers_never_reach_an_honest_learner_and_spares_make_up_for_them() -> None:
    base = SimConfig(peers=200, rounds=6, hostile_fraction=0.2, net=CALM, churn=STILL)
    spare = Simulation(replace(base, strategy="pull_spare", strategy_params={"k": 4, "spares": 3, "extra": 2}))
    got = spare.run()
    plain = simulate(replace(base, strategy="pull_k", strategy_params={"k": 4}))
    assert got.dirty == 0 and plain.dirty == 0
    assert got.far_future_moves == 0
    assert got.mb_in < (4 + 2) * base.payload_bytes / 1e6  # a flooder's commitment is refused before its bytes are pulled
    assert got.received >= 0.97 and plain.received < 0.9  # one in five candidates is hostile
    pop = spare.population
    assert pop is not None
    cheats = {pop.ids[i] for i in np.flatnonzero(np.isin(pop.attack, (FLOOD, FORGE)))}
    jailed = {p for book in pop.books if book is not None for p, why in book.reasons.items() if why.startswith(("payload", "budget"))}
    assert jailed and jailed <= cheats  # caught cheats are quarantined, and nobody honest is
    for o in spare.outcomes:
        assert all(not (senders & cheats) for senders in o.received.values())


def test_per_peer_traffic_is_order_k_for_pull_and_order_n_for_all_to_all() -> None:
    def run(strategy: str, peers: int):  # type: ignore[no-untyped-def]
        cfg = SimConfig(peers=peers, rounds=2, strategy=strategy, net=CALM, churn=STILL, payload_bytes=16 << 10, timeout_s=120, compute_sigma=0.0)
        return simulate(cfg)

    small, large = run("pull_spare", 50), run("pull_spare", 200)
    assert large.mb_in == pytest.approx(small.mb_in, rel=0.1)
    small, large = run("all", 50), run("all", 200)
    assert large.mb_in > 3.5 * small.mb_in
    assert large.exchange_p50 > 2.5 * small.exchange_p50  # 199 pulls share each uplink


def test_same_seed_same_swarm_and_churn_moves_peers() -> None:
    cfg = SimConfig(peers=80, rounds=5, churn=ChurnModel(per_hour=200.0, downtime_s=20.0))
    a, b = simulate(cfg), simulate(cfg)
    assert replace(a, wall_s=0) == replace(b, wall_s=0)
    assert a.churn_events > 10 and a.catch_up_n > 0 and a.dirty == 0


def test_gossip_runs_and_is_checked_like_pulls() -> None:
    s = simulate(SimConfig(peers=150, rounds=3, strategy="gossip", hostile_fraction=0.2, net=CALM, churn=STILL))
    assert s.dirty == 0 and 0.5 < s.received <= 1.0 and s.mb_in > 0


def test_simulate_command_prints_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--peers", "30", "--rounds", "2", "--param", "k=3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["peers"] == 30 and out["strategy"] == "pull_spare" and out["dirty"] == 0
    assert main(["simulate", "--strategy", "flood"]) == 2
    assert "choose one of all, pull_k" in capsys.readouterr().err
