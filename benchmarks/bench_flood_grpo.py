"""How far can one flooding peer of four steer honest GRPO learners on the tiny model? (issue 42)

The GRPO half of the flood search (bench_flood.py is the bandit's; both use flood_search.py): a
search over flood plans (tests/helpers/grpo_flood.py), i.e. which completions a flooder sends for
each task (by the role of their first token: target, decoy, a zero-reward digit, a rare token;
the role of the rest; length 1 to max_new_tokens; duplicates), the log-prob it claims for every
token, the share of the round's tasks it floods and the round it starts in. Every plan is played
by a real peer in the in-memory swarm running the real loop (GameManager, GRPOLearner, rewards
recomputed by each receiver); only its policy is hostile.

The game (tests/helpers/grpo_swarm.py) is one the flood could move: the first token scores 1 for
the seed set's target digit, 0.5 for its decoy, else 0; the tiny model starts near 0.1 and the
three honest peers alone reach 0.6-0.9 in 8 rounds. The eval is exact (the expected first-token
reward on 32 held-out prompts). Arms, each searched on its own:

- ``now``: the learner as it is (swarm claims unread, swarm groups against the own group, a swarm
  token weighing min(1, n * the receiver's own probability of the path up to it), the swarm
  copies of one prefix-and-token edge, from every sender, sharing that budget:
  ``lm/swarm_budget.py``; swarm bodies with an EOS before a completion's end left out);
- ``edge``: the rule before the path budget (an edge's budget n * p, p the receiver's probability
  of the token after its prefix, however unlikely the prefix);
- ``per-copy``: the rule before the edge budget (every copy weighing min(1, n * p) by itself);
- ``control``: every peer learns by the rules before issue 42.3 (claims read with the own
  tokens' cap, each group normalised by itself): shows what the search finds where claims and
  composition do steer, so a small number for ``now`` is not a blind search;
- ``equal-weight``: the rules between issue 42.3 and the bound (every swarm token weighing 1).

Then each arm's worst plan is played against the other arms' learners on every seed set.
``--aware``: the plan space of an attacker aware of the bound: the role ``likely`` (the flooder's
own most likely token other than the target, so its picks weigh what an own sample would) and
known plans built on it, late starts (when the decoy has grown likely) among them.
``--sybils K``: a known plan (``--sybil-plan``, by default the worst against ``per-copy``) sent
from 1 to K flooder ids (tails of their own, so no body copies another's), on every seed set, per
arm (no search).
``--review``: a hostile review's plans outside the roles (tails of blank tokens after the decoy,
then the zero-reward digit; from 1 id and from 3 ids with tails of their own or identical), each
id's completions given as token ids, on every seed set, per arm (no search).
``--adapters``: every peer is a LoRA adapter on the shared base, so it commits to its adapter and
receivers spot-check its bodies against it (a picked completion is then a forgery, and a proof).

    OMP_NUM_THREADS=1 python benchmarks/bench_flood_grpo.py [--seeds 8] [--screen 24] [--climb 16]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from common import machine  # noqa: E402
from flood_search import Result, Space, report, search  # noqa: E402

from genrl_swarm.core import TokenRollout  # noqa: E402
from genrl_swarm.paradigms.lm.learner import Batch, GRPOLearner  # noqa: E402
from genrl_swarm.paradigms.lm.prefix import Chunk  # noqa: E402

from helpers import grpo_swarm  # noqa: E402
from helpers.grpo_flood import AWARE_ROLES, Completion, GRPOFloodPlan, GRPOFloodPolicy, Role, mutate, random_plan, shape  # noqa: E402
from helpers.grpo_swarm import MAX_NEW_TOKENS as LONG  # noqa: E402
from helpers.grpo_swarm import Rules  # noqa: E402


class EdgeLearner(GRPOLearner):
    """The rule before the path budget: an edge's budget is n * p, p the receiver's probability of
    the token after its prefix (not of the path), shared by the copies through it; swarm bodies
    with an EOS inside trained on like any other."""

    def swarm_share(self, draws: float, unit: Batch | Chunk, prox: Any) -> Any:
        return draws if unit.copies is None else draws / unit.copies

    def select(self, state: Any, rewards: Any) -> Any:
        from genrl_swarm.paradigms.lm.selection import sapo_select

        usable = [s for s in rewards.scored if isinstance(s.rollout.body, TokenRollout)]
        own = [s for s in usable if s.rollout.peer_id == state.peer_id]
        swarm = [s for s in usable if s.rollout.peer_id != state.peer_id]
        return sapo_select(own, swarm, self.cfg.num_local, self.cfg.num_external, self.rng, self.cfg.max_external_per_sender)


class PerCopyLearner(EdgeLearner):
    """The rule before the edge budget: every swarm copy of a token weighs min(1, n * p) by itself."""

    def budget(self, samples: Any) -> Any:
        return list(samples)


#: The arms the benchmarks play besides tests/helpers/grpo_swarm's (whose ``per-copy`` reads the
#: path budget now): registered there so ``grpo_swarm.run`` builds them.
grpo_swarm.LEARNERS.update({"edge": EdgeLearner, "per-copy": PerCopyLearner})


def _many(n: int, first: str, filler: str, length: int, claim: float) -> tuple[Completion, ...]:
    return (Completion(first, filler, length, claim),) * n  # type: ignore[arg-type]


#: Plans every search starts from: the issue's attacks in GRPO terms (a good-but-not-best
#: completion among deliberately bad ones, claims that raise or lower its weight, repeats,
#: extreme lengths, a partial share of tasks).
KNOWN = (
    GRPOFloodPlan(_many(1, "decoy", "decoy", LONG, -30.0) + _many(3, "zero", "zero", LONG, -30.0)),
    GRPOFloodPlan(_many(1, "decoy", "decoy", LONG, -30.0) + _many(3, "rare", "rare", LONG, 0.0)),
    GRPOFloodPlan(_many(2, "decoy", "decoy", LONG, math.log(1 / 8)) + _many(2, "zero", "zero", LONG, math.log(1 / 8))),
    GRPOFloodPlan(_many(1, "decoy", "decoy", LONG, 0.0) + _many(1, "zero", "zero", 1, 0.0)),
    GRPOFloodPlan(_many(1, "target", "target", 1, 0.0) + _many(3, "decoy", "decoy", LONG, -30.0)),
    GRPOFloodPlan(_many(1, "decoy", "rare", LONG, -30.0) + _many(1, "zero", "zero", LONG, -30.0), share=0.5),
    # The worst found against the bound (17.2%): the decoy with three tails, so no copy is a repeat.
    GRPOFloodPlan(
        _many(1, "decoy", "zero", LONG, -30.0)
        + _many(1, "decoy", "zero", 2, -30.0)
        + _many(1, "zero", "decoy", 1, -30.0)
        + _many(1, "decoy", "decoy", 1, -30.0)
    ),
    GRPOFloodPlan(  # its extension: four decoys, four tails
        _many(1, "decoy", "zero", LONG, -30.0)
        + _many(1, "decoy", "zero", 2, -30.0)
        + _many(1, "decoy", "rare", LONG, -30.0)
        + _many(1, "decoy", "decoy", 1, -30.0)
    ),
    # The worst found against the edge budget (lm/swarm_budget.py): the base search's (7.8%) and the
    # aware search's (9.1%), still two or three decoys with tails of their own.
    GRPOFloodPlan(
        _many(1, "decoy", "zero", LONG, -30.0)
        + _many(1, "decoy", "zero", 5, -30.0)
        + _many(1, "zero", "decoy", 1, -30.0)
        + _many(1, "rare", "target", 2, 0.0)
    ),
    GRPOFloodPlan(_many(1, "decoy", "zero", LONG, -30.0) + _many(1, "decoy", "zero", 2, -30.0) + _many(1, "rare", "decoy", 1, -30.0)),
)
SPACE = Space(KNOWN, random_plan, mutate, shape)
#: Plans aware of the bound: picks the receiver finds likely (its likeliest wrong first token, then
#: its likeliest continuation), the decoy with a likely continuation, and floods that wait until
#: honest training has made the decoy likely.
AWARE = (
    GRPOFloodPlan(_many(1, "decoy", "likely", LONG, -30.0) + _many(3, "likely", "likely", LONG, -30.0)),
    GRPOFloodPlan(_many(1, "decoy", "likely", LONG, 0.0) + _many(1, "likely", "likely", LONG, 0.0), share=0.5),
    GRPOFloodPlan(_many(4, "likely", "likely", LONG, 0.0)),
    GRPOFloodPlan(_many(1, "decoy", "likely", LONG, -30.0) + _many(3, "zero", "likely", LONG, -30.0), honest_until=3),
    GRPOFloodPlan(_many(1, "decoy", "decoy", LONG, -30.0) + _many(3, "zero", "zero", LONG, -30.0), honest_until=4),
    GRPOFloodPlan(_many(1, "decoy", "likely", 1, 0.0) + _many(1, "likely", "likely", 1, 0.0), honest_until=2),
    # The worst found against the edge budget (10.8% with the claim -9.67 it was found with, 10.9% with
    # this one: the flooder trains on its own claims, so its likely tokens move): one decoy a task, no copies.
    GRPOFloodPlan(_many(1, "decoy", "zero", LONG, -30.0) + _many(1, "zero", "decoy", 5, -10.0) + _many(1, "rare", "likely", 5, 0.0)),
)
#: The worst plan against ``per-copy`` (``KNOWN[6]``) and, for more flooder ids, the same decoys
#: with tails of their own, so that no body copies another's (a hostile review's, which measured it
#: from 2 and 3 ids: 24.4% and 31.4% against per-copy's 17.2% from one).
SYBILS = (
    KNOWN[6],
    GRPOFloodPlan(
        _many(1, "decoy", "rare", LONG, -30.0) + _many(1, "decoy", "rare", 3, -30.0)
        + _many(1, "zero", "rare", 1, -30.0) + _many(1, "decoy", "rare", 4, -30.0)
    ),
    GRPOFloodPlan(
        _many(1, "decoy", "zero", 5, -30.0) + _many(1, "decoy", "rare", 5, -30.0)
        + _many(1, "zero", "zero", 3, -30.0) + _many(1, "decoy", "zero", 3, -30.0)
    ),
)  # fmt: skip
AWARE_SPACE = Space(KNOWN + AWARE, lambda rng: random_plan(rng, AWARE_ROLES), lambda plan, rng: mutate(plan, rng, AWARE_ROLES), shape)


#: Token ids of the tiny vocabulary that decode to blank: '\n', ' ', '\t', '\x0c' and <|im_start|>.
NEWLINE, BLANK, TAB, FORM_FEED, IM_START = 201, 223, 200, 204, 1
ReviewPlan = tuple[tuple[int | str, ...], ...]  # one id's completions, by role letter (T, D, Z, R, E) or token id
_ONE: ReviewPlan = (("D", "Z", "Z", "Z", "Z", "Z"), ("D", NEWLINE, "Z"), ("D", BLANK, "Z"), ("Z",))
#: A hostile review's plans (docs/trust.md): the decoy with tails of blank tokens, then the
#: zero-reward digit, which the receiver finds likely after a blank however unlikely the blank;
#: per plan one tuple per flooder id, and the ``num_external`` it was measured with (24: room for
#: every group, so the selection's slots play no part).
REVIEW: dict[str, tuple[tuple[ReviewPlan, ...], int]] = {
    "blank tails, 1 id": ((_ONE,), 24),
    "blank tails, 3 ids with tails of their own": (
        (
            _ONE,
            (("D", TAB, "Z"), ("D", FORM_FEED, "Z"), ("D", IM_START, "Z"), ("Z",)),
            (("D", NEWLINE, NEWLINE, "Z"), ("D", BLANK, BLANK, "Z"), ("D", NEWLINE, BLANK, "Z"), ("Z",)),
        ),
        24,
    ),
    "blank tails, 3 ids identical": ((_ONE,) * 3, 24),
    "blank then digits, 1 id": (
        ((("D", NEWLINE, "Z", "Z", "Z", "Z"), ("D", BLANK, "Z", "Z", "Z", "Z"), ("D", TAB, "Z", "Z", "Z", "Z"), ("Z",)),),
        12,
    ),
}
REVIEW["blank tails, 3 ids with tails of their own, 12 external groups"] = (REVIEW["blank tails, 3 ids with tails of their own"][0], 12)


def review_completions(roles: grpo_swarm.Tokens, plan: ReviewPlan) -> tuple[tuple[int, ...], ...]:
    """A review plan's completions as token ids (letters name the seed set's roles)."""
    named = {"T": roles.target, "D": roles.decoy, "Z": roles.zero, "R": roles.rare, "E": roles.eos}
    return tuple(tuple(named[t] if isinstance(t, str) else t for t in c) for c in plan)


def review_eval(seed: int, name: str, rules: Rules) -> float:
    """The three honest peers' mean final eval with the review's plan ``name`` played."""
    plans, external = REVIEW[name]
    roles = grpo_swarm.tokens(seed)
    flooders = [grpo_swarm.policy(seed, 3 + i, grpo_swarm.FixedFlooder, completions=review_completions(roles, p)) for i, p in enumerate(plans)]
    saved, grpo_swarm.GRPO = grpo_swarm.GRPO, replace(grpo_swarm.GRPO, num_external=external)
    try:
        return grpo_swarm.honest_eval(seed, flooders, rules)
    finally:
        grpo_swarm.GRPO = saved


def review(arms: list[Rules], seeds: int) -> None:
    """Every ``REVIEW`` plan against every arm, on every seed set (the honest peers alone have room
    for every group at 12 external groups already: 2 honest senders x 4 tasks)."""
    for name in arms:
        base = [grpo_swarm.alone(s, name) for s in range(seeds)]
        print(f"[{name}] without a flooder: honest final eval {statistics.mean(base):.3f} ± {statistics.stdev(base):.3f}", flush=True)
        for plan in REVIEW:
            values = [1 - review_eval(s, plan, name) / b for s, b in enumerate(base)]
            print(f"[{name}] {plan} (num_external {REVIEW[plan][1]}): {statistics.mean(values):+.1%} ± {statistics.stdev(values):.1%} "
                  f"(per seed set: {', '.join(f'{d:+.1%}' for d in values)}); load average {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip


def honest_eval(seed: int, plan: GRPOFloodPlan | tuple[GRPOFloodPlan, ...] | None, rules: Rules) -> float:
    """The three honest peers' mean final eval with a flooder playing ``plan`` (None: alone; a
    tuple: one flooder id per plan)."""
    if plan is None:
        return grpo_swarm.alone(seed, rules)
    plans = plan if isinstance(plan, tuple) else (plan,)
    roles = grpo_swarm.tokens(seed)
    flooders = [grpo_swarm.policy(seed, 3 + i, GRPOFloodPolicy, roles=roles, plan=p) for i, p in enumerate(plans)]
    return grpo_swarm.honest_eval(seed, flooders, rules)


def arm(rules: Rules) -> Callable[[int, GRPOFloodPlan | None], float]:
    """``honest_eval`` for one arm, each (seed set, plan) played once, progress every 50 games."""
    games, start = [0], time.monotonic()

    @cache
    def play(seed: int, plan: GRPOFloodPlan | None) -> float:
        games[0] += 1
        if games[0] % 50 == 0:
            print(f"  {games[0]} games, {time.monotonic() - start:.0f} s, load average {os.getloadavg()[0]:.1f}", flush=True)
        return honest_eval(seed, plan, rules)

    return play


def drops(plan: GRPOFloodPlan | tuple[GRPOFloodPlan, ...], rules: Rules, seeds: int) -> str:
    """``plan``'s relative drop of the honest eval on every seed set, mean ± sd and each."""
    values = [1 - honest_eval(s, plan, rules) / grpo_swarm.alone(s, rules) for s in range(seeds)]
    return f"{statistics.mean(values):+.1%} ± {statistics.stdev(values):.1%} (per seed set: {', '.join(f'{d:+.1%}' for d in values)})"


def retail(plan: GRPOFloodPlan, i: int) -> GRPOFloodPlan:
    """``plan`` for the ``i``-th flooder id: every completion's tail another role, so that no body
    copies another id's (first tokens and lengths unchanged)."""
    tails: tuple[Role, ...] = ("zero", "rare", "decoy")
    return replace(plan, completions=tuple(replace(c, filler=tails[(tails.index(c.filler) + i) % 3] if c.filler in tails else c.filler)
                                           for c in plan.completions))  # fmt: skip


def sybils(arms: list[Rules], ids: int, seeds: int, known: int, only: Sequence[int] = ()) -> None:
    """``KNOWN[known]`` from k = 1..``ids`` flooder ids (or only the counts in ``only``) against
    every arm (``SYBILS`` for the review's plan, ``retail`` for the others)."""
    plans = SYBILS if known == 6 else tuple(retail(KNOWN[known], i) for i in range(ids))
    for name in arms:
        for k in range(1, ids + 1):
            if k in only or not only:
                print(f"[{name}] {plans[0].describe()} from {k} flooder id(s): {drops(plans[:k], name, seeds)}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=8, help="seed sets for the baseline and the finalists")
    p.add_argument("--screen", type=int, default=24, help="random plans screened")
    p.add_argument("--climb", type=int, default=16, help="mutations of the worst plans so far")
    p.add_argument("--screen-seeds", type=int, default=2, help="seed sets a plan is screened on")
    p.add_argument("--control-screen", type=int, default=8, help="the control's random plans (it needs few to show)")
    p.add_argument("--control-climb", type=int, default=8)
    p.add_argument("--search-seed", type=int, default=0)
    p.add_argument("--adapters", action="store_true", help="adapter peers on a shared base: their bodies are spot-checked")
    p.add_argument("--spot-checks", type=int, default=1, help="with --adapters: bodies per sender and stage each receiver checks")
    p.add_argument("--arms", nargs="+", choices=["now", "edge", "per-copy", "control", "equal-weight"], default=["now", "control"])
    p.add_argument("--sybils", type=int, default=0, help="only play a known plan from 1..K flooder ids against each arm")
    p.add_argument("--sybil-plan", type=int, default=6, help="with --sybils: the index of that plan in KNOWN")
    p.add_argument("--sybil-counts", type=int, nargs="*", default=[], help="with --sybils: only these numbers of ids")
    p.add_argument("--review", action="store_true", help="only play the hostile review's token-id plans (REVIEW) against each arm")
    p.add_argument("--aware", action="store_true", help="the plan space of an attacker aware of the bound (role likely)")
    args = p.parse_args()
    if args.adapters:
        grpo_swarm.use_adapters(args.spot_checks)
    peers = f"adapter peers, {args.spot_checks} spot check(s) per sender and stage" if args.adapters else "full models"
    space = AWARE_SPACE if args.aware else SPACE
    print(machine(), f"| OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} | load average {os.getloadavg()[0]:.1f} | {peers}"
          f" | plan space: {'aware of the bound' if args.aware else 'base'}")  # fmt: skip
    print(f"untrained eval: {statistics.mean(grpo_swarm.untrained(s) for s in range(args.seeds)):.3f}")
    if args.sybils:
        sybils(args.arms, args.sybils, args.seeds, args.sybil_plan, args.sybil_counts)
        args.arms = []
    if args.review:
        review(args.arms, args.seeds)
        args.arms = []
    results: dict[Rules, Result[GRPOFloodPlan]] = {}
    for name in args.arms:  # type: Rules
        start = time.monotonic()
        screen, climb = (args.control_screen, args.control_climb) if name == "control" else (args.screen, args.climb)
        play = arm(name)
        results[name] = search(space, play, args.seeds, screen, climb, random.Random(args.search_seed), args.screen_seeds)
        print(f"\n[{name}] plans tried: {results[name].tried} ({time.monotonic() - start:.0f} s); seed sets: {args.seeds}; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
        print("\n".join(report(results[name], GRPOFloodPlan.describe, args.seeds)), flush=True)
    for name, result in results.items():  # each arm's worst plan against every other arm
        for other in sorted(results.keys() - {name}):
            print(f"{name}'s worst plan against {other}: {drops(result.worst[0].plan, other, args.seeds)}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {rss:.0f} MB; load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
