"""One round of epidemic dissemination (push gossip), for the comparison with pulling.

Each peer pushes its own payload to ``fanout`` live members drawn by the core's ``Gossip``
strategy (one draw per peer and hop); a peer forwards, as one bundle, what it newly accepted
in the previous hop, for ``ttl`` hops. A receiver checks every payload against its origin's
signature, so a relay cannot forge; a forging or flooding relay is blamed and quarantined.
Duplicates cost bandwidth and are not forwarded again. A receiver is done when it holds
``want`` clean payloads, or at the deadline. Unreachable peers cannot be pushed to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from genrl_swarm.protocol import Gossip, Strategy, Verdict, classify
from genrl_swarm.sim.model import SimConfig
from genrl_swarm.sim.outcome import RoundOutcome
from genrl_swarm.sim.population import FLOOD, FORGE, FUTURE, HONEST, Population
from genrl_swarm.sim.pull import _close_books, _retries, _rtt


@dataclass
class Spread:
    """What a round of gossip delivered: first arrival per (receiver, origin) key, bytes moved,
    and the rows a receiver refused (receiver, relay, verdict) for its books."""

    arrival: dict[int, float] = field(default_factory=dict)
    bytes_in: np.ndarray = field(default_factory=lambda: np.zeros(0))
    bytes_out: np.ndarray = field(default_factory=lambda: np.zeros(0))
    refused: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)


def _targets(
    pop: Population, cfg: SimConfig, strategy: Strategy, round: int, hop: int, holders: np.ndarray, live: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    index = {p: i for i, p in enumerate(pop.ids)}
    src: list[int] = []
    dst: list[int] = []
    for h in holders:
        book = pop.books[h]
        skip = book.quarantined(round) if book is not None else frozenset()
        chosen = strategy.plan(cfg.swarm, pop.ids[h], round, hop, live, skip=skip).candidates
        src.extend([h] * len(chosen))
        dst.extend(index[c] for c in chosen)
    return np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)


def play(pop: Population, cfg: SimConfig, strategy: Strategy, round: int, live: list[str], rng: np.random.Generator) -> RoundOutcome:
    assert isinstance(strategy, Gossip)
    n, want = len(pop.ids), strategy.want or cfg.want
    alive = np.flatnonzero(pop.alive)
    post = pop.start + rng.lognormal(np.log(cfg.compute_median_s), cfg.compute_sigma, n)
    deadline = post + cfg.timeout_s
    honest = pop.attack == HONEST
    # receipts of the last hop: (holder, origin, time); hop 0 holds each peer's own payload
    holder, origin, when = alive.copy(), alive.copy(), post[alive]
    held = set((alive * n + alive).tolist())
    spread = Spread(bytes_in=np.zeros(n), bytes_out=np.zeros(n))
    for hop in range(strategy.ttl):
        if not len(holder):
            break
        forwards = (hop == 0) | honest[holder]  # hostile peers push their own and relay nothing
        holder, origin, when = holder[forwards], origin[forwards], when[forwards]
        senders = np.unique(holder)
        count = np.bincount(holder, minlength=n)
        ready = np.full(n, -np.inf)
        np.maximum.at(ready, holder, when)
        src, dst = _targets(pop, cfg, strategy, round, hop, senders, live)
        bundle = np.where(pop.attack[src] == FLOOD, 4 * cfg.max_bytes, count[src] * cfg.payload_bytes)
        fanin = np.bincount(dst, minlength=n)
        rate = np.minimum(pop.up[src] / strategy.fanout, pop.down[dst] / np.maximum(fanin[dst], 1))
        rtt = _rtt(rng, cfg, len(src))
        at = ready[src] + rtt + bundle / rate + _retries(rng, cfg, rtt)
        delivered = pop.alive[dst] & ~pop.nat[dst] & (at < pop.dies_at[dst]) & (at <= deadline[dst])
        np.add.at(spread.bytes_out, src[delivered], bundle[delivered])
        np.add.at(spread.bytes_in, dst[delivered], bundle[delivered])
        src, dst, at, bundle = src[delivered], dst[delivered], at[delivered], bundle[delivered]
        verdict = classify(
            np.ones(len(src), dtype=bool), bundle // np.maximum(count[src], 1), cfg.max_bytes, np.ones(len(src), dtype=bool), pop.attack[src] != FORGE
        )
        bad = verdict != Verdict.OK
        spread.refused.append((dst[bad & honest[dst]], src[bad & honest[dst]], verdict[bad & honest[dst]]))
        # expand good bundles into their payloads: every row of the sender's holdings, per target
        keep = np.flatnonzero(~bad)
        order = np.argsort(holder, kind="stable")
        starts = np.searchsorted(holder[order], src[keep])
        sizes = count[src[keep]]
        row = np.repeat(keep, sizes)
        offs = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        new_origin = origin[order][np.repeat(starts, sizes) + offs]
        new_holder, new_when = dst[row], at[row]
        keys = new_holder * n + new_origin
        fresh_order = np.lexsort((new_when, keys))
        keys, new_holder, new_origin, new_when = keys[fresh_order], new_holder[fresh_order], new_origin[fresh_order], new_when[fresh_order]
        unique = np.r_[True, keys[1:] != keys[:-1]]
        unseen = np.array([k not in held for k in keys.tolist()], dtype=bool) & unique
        held.update(keys[unseen].tolist())
        spread.arrival.update(zip(keys[unseen].tolist(), new_when[unseen].tolist()))
        holder, origin, when = new_holder[unseen], new_origin[unseen], new_when[unseen]
    return _outcome(pop, cfg, round, want, spread, post=post, deadline=deadline)


def _outcome(pop: Population, cfg: SimConfig, round: int, want: int, spread: Spread, post: np.ndarray, deadline: np.ndarray) -> RoundOutcome:
    n = len(pop.ids)
    alive = np.flatnonzero(pop.alive)
    receivers = alive[pop.attack[alive] == HONEST]
    keys = np.fromiter(spread.arrival.keys(), dtype=np.int64, count=len(spread.arrival))
    times = np.fromiter(spread.arrival.values(), dtype=np.float64, count=len(spread.arrival))
    rcv, org = keys // n, keys % n
    clean = (rcv != org) & np.isin(pop.attack[org], (HONEST, FUTURE))
    dirty = int(np.sum((rcv != org) & np.isin(pop.attack[org], (FLOOD, FORGE))))
    end = deadline.copy()
    got = np.bincount(rcv[clean], minlength=n)
    order = np.lexsort((times[clean], rcv[clean]))
    r_sorted, t_sorted = rcv[clean][order], times[clean][order]
    firsts = np.searchsorted(r_sorted, receivers)
    enough = got[receivers] >= want
    end[receivers[enough]] = np.maximum(post[receivers[enough]], t_sorted[firsts[enough] + want - 1])
    end[receivers] += cfg.cpu.receive_s(0, spread.bytes_in[receivers])
    group_of = {int(p): g for g, p in enumerate(receivers)}
    for dst, src, verdict in spread.refused:
        if len(dst):
            _close_books(pop, round, receivers, np.array([group_of[int(d)] for d in dst]), src, verdict)
    finished = end[receivers] < pop.dies_at[receivers]
    ends = {int(p): float(post[p]) for p in alive}
    ends.update({int(p): float(end[p]) for p in receivers})
    r = receivers[finished]
    return RoundOutcome(
        receivers=r,
        clean=got[r],
        round_s=end[r] - pop.start[r],
        exchange_s=end[r] - post[r],
        bytes_in=spread.bytes_in[r],
        bytes_out=spread.bytes_out[receivers],
        dirty=dirty,
        copies=0,
        ends=ends,
        received={},
        available=len(alive) - 1,
    )
