"""One run of an adversary strategy: three honest bandit peers and one hostile one, real
GameManagers on an in-memory board, the invariants (``invariants``) checked after every round."""

from __future__ import annotations

import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from genrl_swarm.coord import LocalCoordinator
from genrl_swarm.coord.scores import round_rewards
from genrl_swarm.core import GameManager, GameState, RoundResult
from genrl_swarm.core.identity import Identity

from helpers import bandit_swarm
from helpers.adversary import invariants
from helpers.adversary.behaviours import Strategy
from helpers.adversary.coalition import Colluding, Recorder
from helpers.adversary.hostile import HostileBackend, old_run_records
from helpers.adversary.invariants import Violation
from helpers.adversary.network import Network, RiggedBackend
from helpers.adversary.strategy import HONEST
from helpers.flood import FloodPolicy


@dataclass
class Outcome:
    """What a run found: the violations, what the adversary did (``done``) and what landed:
    the honest peers' drops of the adversary's ids by kind, and the rounds an honest peer held
    the adversary in quarantine."""

    strategy: Strategy
    violations: list[Violation] = field(default_factory=list)
    honest_eval: list[float] = field(default_factory=list)
    alone_eval: float = 0.0
    seconds: float = 0.0
    hostile_drops: Counter[str] = field(default_factory=Counter)
    quarantined_rounds: int = 0
    done: Counter[str] = field(default_factory=Counter)  # what the adversary did, by behaviour

    @property
    def eval_loss(self) -> float:
        mean = sum(self.honest_eval) / max(len(self.honest_eval), 1)
        return 1 - mean / self.alone_eval if self.alone_eval > 0 else 0.0


def play(strategy: Strategy, rounds: int = bandit_swarm.ROUNDS, timeout: float = 1.0) -> Outcome:
    """Run ``strategy`` for ``rounds`` rounds (``timeout``: each exchange's deadline)."""
    start, outcome, lock = time.monotonic(), Outcome(strategy), threading.Lock()
    network, honest_ids = Network(), [f"peer-{i}" for i in range(HONEST)]
    honest, me = set(honest_ids), f"peer-{HONEST}"
    identities = [Identity.generate() for _ in honest_ids]
    inner = LocalCoordinator(settle_wait=4 * timeout)
    books = Recorder(inner)

    def found(violations: list[Violation]) -> None:
        with lock:
            outcome.violations += violations

    def after_rewards(manager: GameManager, state: GameState, _: Any) -> None:
        found(invariants.counted_drops(state.round, manager.peer_id, state.drops, honest))
        with lock:
            outcome.hostile_drops.update(str(d.kind) for d in state.drops if d.peer_id not in honest)

    def after_round(manager: GameManager, result: RoundResult) -> None:
        r, book = result.round, manager.book
        found(invariants.quarantines(r, manager.peer_id, book.quarantined(r + 1), honest, book.reasons))
        with lock:
            outcome.quarantined_rounds += me in book.quarantined(r + 1)
        if r > 0:
            found(invariants.settled(r - 1, manager.peer_id, inner.settled(r - 1)))

    managers = []
    for rank, (peer, identity) in enumerate(zip(honest_ids, identities)):
        m = bandit_swarm.manager(RiggedBackend(network, peer, identity), books, strategy.seed, rank, rounds, timeout)
        m.hooks.after_rewards.append(after_rewards)
        m.hooks.after_round.append(after_round)
        managers.append(m)
    replay_old = strategy.replay is not None and strategy.replay.old_run
    old = old_run_records(dict(zip(honest_ids, identities)), "genrl-swarm", rounds, bandit_swarm.STAGES) if replay_old else []
    hostile_comm = HostileBackend(network, me, strategy, honest_ids, old)
    policy = None
    if strategy.flood is not None:
        policy = FloodPolicy(bandit_swarm.data(strategy.seed).payoffs, strategy.flood, **bandit_swarm.policy_kwargs(strategy.seed, HONEST))
    coordinator = Colluding(books, strategy.collude, me, honest_ids) if strategy.collude else books
    adversary = bandit_swarm.manager(hostile_comm, coordinator, strategy.seed, HONEST, rounds, timeout, policy)

    def run(m: GameManager) -> None:
        try:
            m.run(keep_results=False)
        except BaseException as e:  # noqa: BLE001 - an honest peer's exception is a violation
            where = m.peer_id if m is not adversary else "adversary (a harness bug)"
            found([Violation(-1, where, f"{type(e).__name__}: {e} {traceback.format_exc(limit=-3)}")])
        finally:
            m.comm.close()

    threads = [threading.Thread(target=run, args=(m,), daemon=True) for m in [*managers, adversary]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(rounds * (8 * timeout + 5))
    stuck = [m.peer_id for m, t in zip([*managers, adversary], threads) if t.is_alive()]
    if stuck:
        for m in [*managers, adversary]:
            m.stop()
        found([Violation(-1, ", ".join(stuck), "did not finish its rounds")])
    for r, reports in sorted(books.reports.items()):
        found(invariants.honest_rewards(r, reports, round_rewards(reports), honest))  # LocalCoordinator's rule
    outcome.done = hostile_comm.done
    outcome.honest_eval = [m.evaluate()["eval/reward"] for m in managers]
    outcome.alone_eval = bandit_swarm.mean_alone(strategy.seed, rounds)
    if strategy.collude is None or strategy.collude.size == 1:  # one adversary of four
        found(invariants.eval_loss(outcome.honest_eval, [outcome.alone_eval]))
    outcome.seconds = time.monotonic() - start
    return outcome
