"""One round of a pull strategy (all, pull_k, pull_spare), every pull settled in numpy.

Each honest receiver asks the core's strategy for its plan; the rows (receiver, candidate)
then go through the two phases of the transport: commitments (tiny: one RTT after both sides
are ready), then payloads from those that committed within budget (an RTT plus the bytes at
the fair share of the sender's uplink and the receiver's downlink), each phase ended by the
core's ``collect``. Verdicts come from the core's ``classify``/``first_committers`` and go
into each receiver's ``SenderBook``, whose quarantines and offenders shape the next plans.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from genrl_swarm.protocol import AllToAll, Deadlines, Strategy, Verdict, classify, collect, drops_of, first_committers, offenders
from genrl_swarm.sim.model import SimConfig
from genrl_swarm.sim.outcome import RoundOutcome
from genrl_swarm.sim.population import COPY, FLOOD, FORGE, FUTURE, HONEST, Population

COMMIT_BYTES = 300  # a signed commitment on the wire
#: A copier posts its commitment this long after its own payload would be ready: time to pull
#: someone else's reveal and commit to it as its own.
COPY_DELAY_S = 2.0
#: Receivers whose accepted senders are reported (the scripted comparison with the transport).
REPORT_RECEIVED = 64


@dataclass(frozen=True)
class Rows:
    group: np.ndarray  # receiver position (0..G-1)
    cand: np.ndarray  # candidate peer number
    needed: np.ndarray  # per receiver


def plan_rows(pop: Population, cfg: SimConfig, strategy: Strategy, round: int, live: list[str], receivers: np.ndarray) -> Rows:
    """Ask the core for every receiver's plan (the same call the transport makes)."""
    index = {p: i for i, p in enumerate(pop.ids)}
    groups: list[int] = []
    cands: list[int] = []
    needed = np.zeros(len(receivers), dtype=np.int64)
    for g, peer in enumerate(receivers):
        book = pop.books[peer]
        assert book is not None
        plan = strategy.plan(cfg.swarm, pop.ids[peer], round, 0, live, skip=book.quarantined(round), low=offenders(book, round))
        cands.extend(index[c] for c in plan.candidates)
        groups.append(len(plan.candidates))
        needed[g] = plan.needed
    return Rows(np.repeat(np.arange(len(receivers)), groups), np.array(cands, dtype=np.int64), needed)


def _rtt(rng: np.random.Generator, cfg: SimConfig, n: int) -> np.ndarray:
    rtt: np.ndarray = rng.lognormal(np.log(cfg.net.rtt_median_ms / 1000), cfg.net.rtt_sigma, n)
    return rtt


def _retries(rng: np.random.Generator, cfg: SimConfig, rtt: np.ndarray) -> np.ndarray:
    """Extra time of pulls that failed and were retried (geometric number of failures)."""
    if cfg.net.loss <= 0:
        return np.zeros(len(rtt))
    failures = rng.geometric(1 - cfg.net.loss, len(rtt)) - 1
    extra: np.ndarray = failures * (np.maximum(cfg.net.retry_s, 2 * rtt) + rtt)
    return extra


def play(pop: Population, cfg: SimConfig, strategy: Strategy, round: int, live: list[str], rng: np.random.Generator) -> RoundOutcome:
    alive = np.flatnonzero(pop.alive)
    compute = rng.lognormal(np.log(cfg.compute_median_s), cfg.compute_sigma, len(pop.ids))
    post = pop.start + compute  # own payload ready and commitment posted
    post[pop.attack == COPY] += COPY_DELAY_S
    receivers = alive[pop.honest[alive]]
    scale = 1.0
    if isinstance(strategy, AllToAll) and len(receivers) > cfg.observe:
        scale = len(receivers) / cfg.observe
        receivers = np.sort(rng.choice(receivers, cfg.observe, replace=False))
    rows = plan_rows(pop, cfg, strategy, round, live, receivers)
    grp, cand = rows.group, rows.cand
    rcv = receivers[grp]
    ask = post[receivers]
    deadlines = Deadlines.of(ask, cfg.timeout_s)  # numpy arrays: one deadline per receiver

    # Phase 1: commitments. Unreachable, dead and dying candidates never answer.
    rtt = _rtt(rng, cfg, len(cand))
    answer = np.maximum(post[rcv] + rtt / 2, post[cand]) + rtt / 2 + _retries(rng, cfg, rtt)
    reachable = pop.alive[cand] & ~pop.nat[cand] & (answer < pop.dies_at[cand])
    answer[~reachable] = np.inf
    committed, commit_end = collect(grp, answer, reachable, rows.needed, ask, deadlines.commit)
    ncommits = np.bincount(grp, weights=committed, minlength=len(receivers))
    asked = np.bincount(grp, minlength=len(receivers))
    commit_end = commit_end + cfg.cpu.receive_s(ncommits, 0) + cfg.cpu.pulls_s(asked, len(cand) * scale)

    # Every peer's reveal is posted when its own commit phase ends (hostile ones at once).
    revealed_at = post.copy()
    honest_alive = alive[pop.honest[alive]]
    revealed_at[honest_alive] += float(np.median(commit_end - ask)) if len(ask) else 0.0
    revealed_at[receivers] = commit_end

    # Phase 2: payloads from those that committed within budget.
    size = np.where(pop.attack[cand] == FLOOD, 4 * cfg.max_bytes, cfg.payload_bytes)
    pull = committed & (size <= cfg.max_bytes)
    load = np.bincount(cand[pull], minlength=len(pop.ids)) * scale
    fanin = np.bincount(grp[pull], minlength=len(receivers))
    rate = np.minimum(pop.up[cand] / np.maximum(load[cand], 1), pop.down[rcv] / np.maximum(fanin[grp], 1))
    rtt2 = _rtt(rng, cfg, len(cand))
    begins = np.maximum(commit_end[grp] + rtt2 / 2, revealed_at[cand]) + rtt2 / 2 + _retries(rng, cfg, rtt2)
    got = begins + size / rate
    got[~pull | (got >= pop.dies_at[cand])] = np.inf
    arrived, end = collect(grp, got, pull & np.isfinite(got), fanin, commit_end, deadlines.reveal)
    # bytes on the wire by the receiver's end, finished or not (a late payload still cost them)
    moved = np.where(pull, np.clip((np.minimum(end[grp], pop.dies_at[cand]) - begins) * rate, 0, size), 0)

    # Verdicts (the transport's order), then copies among what passed.
    verdict = classify(np.ones(len(cand), dtype=bool), size, cfg.max_bytes, arrived, pop.attack[cand] != FORGE)
    originals = np.flatnonzero(pop.honest & ~pop.nat)
    digest = np.where(pop.attack[cand] == COPY, originals[cand % len(originals)], cand)  # a copier re-sends an honest peer's bytes
    passed = np.flatnonzero(verdict == Verdict.OK)
    first = first_committers(grp[passed], digest[passed], post[cand[passed]])
    verdict[passed[~first]] = Verdict.COPY
    judged = committed  # only rows whose commitment came in are judged at all
    ok = judged & (verdict == Verdict.OK)

    bytes_in = ncommits * COMMIT_BYTES + np.bincount(grp, weights=moved, minlength=len(receivers))
    end = end + cfg.cpu.receive_s(0, bytes_in) + cfg.cpu.pulls_s(fanin, pull.sum() * scale)
    bytes_out = np.bincount(cand, weights=moved, minlength=len(pop.ids)) * scale
    clean = np.bincount(grp, weights=ok & np.isin(pop.attack[cand], (HONEST, FUTURE)), minlength=len(receivers))
    dirty = int(np.sum(ok & np.isin(pop.attack[cand], (FLOOD, FORGE))))
    copies = int(np.sum(ok & (pop.attack[cand] == COPY)))
    _close_books(pop, round, receivers, grp, cand, np.where(judged, verdict, Verdict.OK))

    finished = end < pop.dies_at[receivers]
    ends = {int(p): float(post[p]) for p in alive}  # hostile peers: done when posted
    typical = float(np.median(end - ask)) if len(end) else 0.0
    ends.update({int(p): float(post[p] + typical) for p in honest_alive})
    ends.update({int(p): float(e) for p, e in zip(receivers, end)})
    received = {}
    if len(receivers) <= REPORT_RECEIVED:
        received = {pop.ids[p]: frozenset(pop.ids[c] for c in cand[ok & (grp == g)]) for g, p in enumerate(receivers)}
    return RoundOutcome(
        receivers=receivers[finished],
        clean=clean[finished],
        round_s=(end - pop.start[receivers])[finished],
        exchange_s=(end - ask)[finished],
        bytes_in=bytes_in[finished],
        bytes_out=bytes_out[honest_alive],
        dirty=dirty,
        copies=copies,
        ends=ends,
        received=received,
        available=len(live) - 1,
    )


def _close_books(pop: Population, round: int, receivers: np.ndarray, grp: np.ndarray, cand: np.ndarray, verdict: np.ndarray) -> None:
    """Each receiver's drops into its SenderBook (quarantines for the next plans)."""
    bad = np.flatnonzero(verdict != Verdict.OK)
    if not len(bad):
        return
    order = bad[np.argsort(grp[bad], kind="stable")]
    cuts = np.flatnonzero(np.diff(grp[order])) + 1
    for chunk in np.split(order, cuts):
        book = pop.books[receivers[grp[chunk[0]]]]
        assert book is not None
        book.close_round(round, drops_of([pop.ids[c] for c in cand[chunk]], verdict[chunk].tolist(), 0))
