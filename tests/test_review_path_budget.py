"""Hostile review of the path budget (issue 42): one adversary behind nine Sybil ids.

The path budget bounds what the swarm's completions *weigh* (at most n per position, whatever the
ids): measured with 9 ids each sending its own bodies and every group trained on (num_external 48),
the flood costs 3.2% +- 13.3% over seed sets 0-7, inside the goal. But which swarm groups are trained
on at all is the SAPO draw (``lm/selection.py``), whose fair share is per sender *id*: with the
benchmark's num_external 12 (room for the two honest senders' 8 groups and one flooder's 4), nine
ids take about 9 of the 12 turns and the honest senders' groups are left out. Same plan, same
seeds: 13.9% +- 7.9% (every seed set positive, 0.7% to 24.0%), against 1.7% +- 11.7% from 1 id and
2.9% +- 11.9% from 3. Not sharing at all costs 22% on these seed sets: the Sybils take most of what
sharing gives, inside every weight bound. The claim "a flood costs at most a tenth, whatever the
ids" does not hold for the selection; this test is the measurement, expected to fail until it does.
"""

from __future__ import annotations

import statistics

import pytest

pytest.importorskip("torch")
import torch  # noqa: E402, F401 - the GRPO swarm (helpers.grpo_swarm) trains with it

from helpers import grpo_swarm  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SYBILS, SEED_SETS = 9, range(8)


def sybil_completions(roles: grpo_swarm.Tokens, index: int) -> tuple[tuple[int, ...], ...]:
    """One of the adversary's ids: a decoy then five id-specific filler tokens, and two zero-reward
    digits with id-specific tails, for every task (so no body copies another id's)."""
    tail = 300 + 7 * index  # non-digit ids of the tiny vocabulary, distinct per Sybil
    return ((roles.decoy,) + (tail,) * 5, (roles.zero,) + (tail + 1,) * 5, (roles.zero, tail + 2))


def drop(seed: int) -> float:
    roles = grpo_swarm.tokens(seed)
    flooders = [grpo_swarm.policy(seed, 3 + i, grpo_swarm.FixedFlooder, completions=sybil_completions(roles, i)) for i in range(SYBILS)]
    return 1 - grpo_swarm.honest_eval(seed, flooders, "now") / grpo_swarm.alone(seed, "now")


@pytest.mark.slow  # 16 GRPO games, 8 of them with 12 peers: about 2-3 minutes on 2 loaded cores
@pytest.mark.timeout(900)
@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="hostile review: the SAPO draw's fair share is per sender id, so 9 Sybil ids crowd the honest senders' groups out "
    "of num_external (13.9% +- 7.9% over seed sets 0-7; 3.2% with room for every group): the weight bound holds, the selection does not",
)
def test_nine_sybil_ids_cost_at_most_a_tenth_of_honest_eval() -> None:
    drops = [drop(seed) for seed in SEED_SETS]
    assert statistics.mean(drops) <= 0.10, drops
