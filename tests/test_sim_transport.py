"""The real HiveMind transport drives the protocol core's exchange strategy, and the simulator
agrees with it on who receives what: four real p2pd peers on 127.0.0.1 and the simulator play
the same scripted rounds (everyone honest; one peer forging its reveal; that peer killed)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from genrl_swarm.protocol import make_strategy
from genrl_swarm.sim import ChurnModel, NetModel, SimConfig
from genrl_swarm.sim import pull as sim_pull
from genrl_swarm.sim.population import FORGE, HONEST, Population

hivemind = pytest.importorskip("hivemind")  # bound: the peers below are hivemind processes
from genrl_swarm.comm.hivemind.dht import HivemindBackend  # noqa: E402
from genrl_swarm.comm.hivemind.process import kill_all, p2pd_of  # noqa: E402
from test_hivemind import backend, play, wait_until  # noqa: E402

pytestmark = pytest.mark.slow  # four p2pd peers

SWARM = "agree"
LIVENESS = 6.0  # long enough to exchange with a killed peer still counted as live


@pytest.fixture(scope="module")
def four() -> Iterator[list[HivemindBackend]]:
    a = backend(swarm=SWARM, strategy="pull_k", k=2, liveness_timeout=LIVENESS)
    peers = [a, *(backend(a, swarm=SWARM, strategy="pull_k", k=2, liveness_timeout=LIVENESS) for _ in range(3))]
    try:
        wait_until(lambda: all(len(p.membership.live()) == 4 for p in peers), 30, "four peers to see each other")
        yield sorted(peers, key=lambda p: p.peer_id)
    finally:
        for p in peers:
            p.close()


def simulated(
    ids: Sequence[str], round: int, strategy: str, params: dict[str, int], forger: str | None = None, dead: str | None = None
) -> dict[str, frozenset[str]]:
    """The simulator's answer for one round of these four peers (calm network, no churn)."""
    cfg = SimConfig(
        peers=len(ids),
        strategy=strategy,
        strategy_params=params,
        swarm=SWARM,
        net=NetModel(loss=0.0, nat_fraction=0.0),
        churn=ChurnModel(per_hour=0.0),
    )
    pop = Population(cfg, np.random.default_rng(0))
    pop.ids = list(ids)
    pop.attack[:] = HONEST
    if forger is not None:
        pop.attack[pop.ids.index(forger)] = FORGE
    if dead is not None:
        pop.alive[pop.ids.index(dead)] = False
    outcome = sim_pull.play(pop, cfg, make_strategy(strategy, **params), round, sorted(ids), np.random.default_rng(1))
    return outcome.received


def real(peers: Sequence[HivemindBackend], round: int, timeout: float = 20.0) -> dict[str, frozenset[str]]:
    results = play(peers, round, timeout=timeout)
    return {p: frozenset(r.received) - {p} for p, r in results.items()}


def test_simulator_and_transport_agree_on_who_receives_what(four: list[HivemindBackend]) -> None:
    ids = [p.peer_id for p in four]
    got = real(four, 1)
    assert all(len(senders) == 2 for senders in got.values())  # pull_k: two of the three others
    assert got == simulated(ids, 1, "pull_k", {"k": 2})
    # The forger must be a peer someone pulls from in round 2 (peer ids, hence the draw, are new
    # each run): the honest plan of that round says who is asked.
    honest = simulated(ids, 2, "pull_k", {"k": 2})
    forger = next(p for p in four if any(p.peer_id in senders for q, senders in honest.items() if q != p.peer_id))
    honest_send = forger._exchange_bytes

    def forge(round: int, stage: int, phase: str, data: bytes, timeout: float, wait_for: object = None) -> object:
        return honest_send(round, stage, phase, b"\x00" * len(data) if phase == "reveal" else data, timeout, wait_for)  # type: ignore[arg-type]

    forger._exchange_bytes = forge  # type: ignore[method-assign]
    try:
        got = real(four, 2)
    finally:
        del forger._exchange_bytes
    expected = simulated(ids, 2, "pull_k", {"k": 2}, forger=forger.peer_id)
    assert {p: s for p, s in got.items() if p != forger.peer_id} == expected
    assert any(forger.peer_id in p.plans[(2, 0)].candidates for p in four if p is not forger)  # someone did ask the forger


def test_pull_spare_does_not_wait_for_a_killed_peer_and_agrees_with_the_simulator(four: list[HivemindBackend]) -> None:
    ids = [p.peer_id for p in four]
    victim, survivors = four[-1], four[:3]
    for p in four:
        p.strategy = make_strategy("pull_spare", k=2, spares=1, extra=0)
    p2pd = p2pd_of(victim.dht.pid)
    os.kill(victim.dht.pid, signal.SIGKILL)
    kill_all([p2pd])
    assert all(victim.peer_id in p.membership.live() for p in survivors)  # still counted live for LIVENESS s
    start = time.monotonic()
    got = real(survivors, 3, timeout=30.0)
    elapsed = time.monotonic() - start
    assert all(victim.peer_id in p.plans[(3, 0)].candidates for p in survivors)  # asked, never answered
    assert elapsed < 5.0, f"waited {elapsed:.1f}s for a dead candidate"
    assert got == {p.peer_id: frozenset(ids[:3]) - {p.peer_id} for p in survivors}
    assert got == simulated(ids, 3, "pull_spare", {"k": 2, "spares": 1, "extra": 0}, dead=victim.peer_id)


def test_gossip_and_unknown_strategies_are_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="gossip is simulated only"):
        HivemindBackend(swarm=SWARM, strategy="gossip")
    with pytest.raises(ValueError, match="k must be >= 1"):
        HivemindBackend(swarm=SWARM, strategy="pull_k", k=0)
