"""The bandit learner's step: the policy gradient over the arms observed this round, weighted by
the receiver's own policy, so nothing a sender claims or chooses to repeat steers it.

A pull's reward is the arm's payoff in the task's hidden row, computed by the receiver itself:
the same arm always scores the same. So a body tells the receiver one thing, which arms it
pulled, and this peer's own pulls and the swarm's are one set of observed arms with known
rewards. The step is the expected policy gradient restricted to that set,

    g = sum over observed arms a of  p(a) * (Q(a) - b) / s * (e_a - p),

where p is this peer's policy, b and s the p-weighted mean and standard deviation of Q over the
observed arms (its baseline and scale for the task), e_a the arm's one-hot vector. With every arm
observed it is the exact gradient an on-policy REINFORCE step estimates.

What this takes away from a sender (issue 42.3; before, a flood inside every bound cost honest
learners 13.5-15.7% of final eval):

- **claimed log-probs**: not read. Each arm weighs what this peer's own policy gives it;
- **repetition**: pulling an arm four times is observing it once;
- **group composition**: the baseline and scale are p-weighted, so arms this peer rarely plays
  barely move them, and extra arms never dilute the others' terms (no mean over a pull count).

What a sender still decides: which true rewards this peer sees. An arm it adds contributes its
true component of the gradient; it cannot remove the arms honest peers reveal.
``benchmarks/bench_flood.py`` searches for the worst such choice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np

#: Below this, the observed arms' rewards are one value (no signal) or carry no probability.
EPS = 1e-8


def observed(pulls: Iterable[tuple[int, float]]) -> dict[int, float]:
    """arm -> its reward (the mean, should a reward rule ever score one arm differently)."""
    total: defaultdict[int, float] = defaultdict(float)
    count: defaultdict[int, int] = defaultdict(int)
    for arm, reward in pulls:
        total[arm] += reward
        count[arm] += 1
    return {arm: total[arm] / count[arm] for arm in total}


def observed_gradient(probs: np.ndarray, rewards: dict[int, float]) -> np.ndarray | None:
    """The policy gradient over the observed arms (module docstring); None when they carry no
    signal (one reward, or no probability under ``probs``: arms outside this peer's offer)."""
    arms = np.array([a for a in rewards if 0 <= a < len(probs) and probs[a] > 0], dtype=int)
    if len(arms) == 0:
        return None
    p, q = probs[arms], np.array([rewards[a] for a in arms])
    mass = float(p.sum())
    baseline = float(p @ q) / mass
    scale = float(np.sqrt(p @ (q - baseline) ** 2 / mass))
    if scale < EPS:
        return None
    weights = p * (q - baseline) / scale
    gradient = -weights.sum() * probs
    gradient[arms] += weights
    return np.asarray(gradient)
