"""The simulator's main loop: churn events up to each round, membership renewals, the quorum
catch-up check, one round of the strategy, and the books of what happened.

Rounds are not in lockstep: each peer starts its next round when its exchange ended, and a
pull waits for the sender to have posted, so slow peers hold back those that pull from them,
as on the real transport. The round clock for churn is the median start of the live peers.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from genrl_swarm.protocol import Gossip, make_strategy
from genrl_swarm.protocol.view import forget_after
from genrl_swarm.sim import gossip, pull
from genrl_swarm.sim.model import SimConfig
from genrl_swarm.sim.outcome import RoundOutcome
from genrl_swarm.sim.population import Population
from genrl_swarm.sim.summary import Summary, summarize

#: A joining peer looks up the member records: about log2(N) DHT hops of one RTT each.
LOOKUP_RTTS_PER_DOUBLING = 1.0


@dataclass
class Simulation:
    cfg: SimConfig
    outcomes: list[RoundOutcome] = field(default_factory=list)
    far_future_moves: int = 0
    churn_events: int = 0
    catch_up_s: list[float] = field(default_factory=list)
    population: Population | None = None  # after run(): the peers, their books included

    def run(self) -> Summary:
        cfg = self.cfg
        rng = np.random.default_rng(cfg.seed)
        strategy = make_strategy(cfg.strategy, **cfg.strategy_params)
        pop = self.population = Population(cfg, rng)
        want = strategy.want or cfg.want
        lookup = LOOKUP_RTTS_PER_DOUBLING * np.log2(cfg.peers) * cfg.net.rtt_median_ms / 1000
        trust_log = logging.getLogger("genrl_swarm.core.trust")
        level, started = trust_log.level, time.perf_counter()
        trust_log.setLevel(logging.ERROR)  # thousands of simulated quarantines are not news
        try:
            for round in range(cfg.rounds):
                now = float(np.median(pop.start[pop.alive])) if pop.alive.any() else 0.0
                self.churn_events += pop.advance(now, round)
                joined = ~np.isnan(pop.joined_at)
                pop.start[joined & (pop.start < pop.joined_at + lookup)] += lookup
                pop.renew(now, round)
                live = pop.view.servers(now)
                honest = list(np.flatnonzero(pop.alive & pop.honest)[:1])
                if honest and pop.view.catch_up(pop.ids[honest[0]], round, now, cfg.quorum, cfg.max_jump) > round:
                    self.far_future_moves += 1
                play = gossip.play if isinstance(strategy, Gossip) else pull.play
                outcome = play(pop, cfg, strategy, round, live, rng)
                self.outcomes.append(outcome)
                for peer, end in outcome.ends.items():
                    pop.start[peer] = end
                self._time_catch_up(pop, outcome, want)
                pop.view.forget(now, forget_after(cfg.liveness_s))
        finally:
            trust_log.setLevel(level)
        return summarize(
            cfg,
            want,
            self.outcomes,
            moves=self.far_future_moves,
            catch_up=self.catch_up_s,
            churn=self.churn_events,
            wall=time.perf_counter() - started,
        )

    def _time_catch_up(self, pop: Population, outcome: RoundOutcome, want: int) -> None:
        """A rejoined peer has caught up at the end of its first round with what it wanted."""
        done = outcome.receivers[outcome.clean >= want]
        for peer in done[~np.isnan(pop.joined_at[done])]:
            self.catch_up_s.append(float(pop.start[peer] - pop.joined_at[peer]))
            pop.joined_at[peer] = np.nan


def simulate(cfg: SimConfig) -> Summary:
    return Simulation(cfg).run()
