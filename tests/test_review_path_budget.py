"""Hostile review of the path budget (issue 42): one adversary behind nine Sybil ids.

The path budget bounds what the swarm's completions *weigh* (at most n per position, whatever the
ids). Which swarm groups are trained on at all is the SAPO draw (``lm/selection.py``). Drawn with
senders taking turns, nine ids took about 9 of the benchmark's 12 turns (num_external 12: room
for the two honest senders' 8 groups and one flooder's 4), crowding the honest senders' groups
out: 13.9% +- 7.9% of honest evaluation over seed sets 0-7 (every seed set positive), against
1.7% from one id and about 22% for not sharing at all. The draw now ranks competing groups by
what they teach the receiver (``lm/swarm_value.py``: the gain of their best completion over its
own rewards, times its own probability of it), so ids win only exact ties: 0.7% +- 10.5%.
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
def test_nine_sybil_ids_cost_at_most_a_tenth_of_honest_eval() -> None:
    drops = [drop(seed) for seed in SEED_SETS]
    assert statistics.mean(drops) <= 0.10, drops
