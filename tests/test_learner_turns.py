"""In-process peers take turns updating on a device (``GRPOLearner.train``, ``TURNS``)."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("torch")
import torch  # noqa: E402, F401 - the learner

from genrl_swarm.core import GameState, RoundRewards  # noqa: E402
from genrl_swarm.paradigms.lm.learner import GRPOLearner  # noqa: E402
from genrl_swarm.paradigms.lm.policy import LMPolicy  # noqa: E402


def test_in_process_peers_update_one_at_a_time() -> None:
    """They share the device's cores, so updating at once gains nothing, while each update's
    activations would be held at once (3 SmolLM2 adapter peers of the demo: 4.9 GB against 3.3 GB
    taking turns, with one heap)."""
    inside, most, calls, lock = [0], [0], [0], threading.Lock()

    class Recording(GRPOLearner):
        def update(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
            with lock:
                inside[0], calls[0] = inside[0] + 1, calls[0] + 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.05)
            with lock:
                inside[0] -= 1
            return {}

    policy = LMPolicy("tiny-random", {"num_generations": 2, "max_new_tokens": 4})
    learners = [Recording(policy, {}, seed=i) for i in range(3)]
    threads = [
        threading.Thread(target=lambda learner=learner: [learner.train(GameState(0, "me"), RoundRewards(0, ())) for _ in range(5)])
        for learner in learners
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads) and calls[0] == 15 and most[0] == 1
