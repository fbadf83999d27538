"""A bandit policy slow to load: what a peer loading its model looks like to the swarm.

The launcher starts a peer's transport (on HiveMind: its membership is announced) before it builds
the game's components, so a model that takes seconds to load leaves a member that cannot commit
yet. Loaded by Hydra target in peer processes (``PYTHONPATH=tests``): numpy only, no torch."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from genrl_swarm.core import Body, StageInput
from genrl_swarm.games.bandit import SoftmaxPolicy


class LoadingPolicy(SoftmaxPolicy):
    """``SoftmaxPolicy`` that sleeps ``load_seconds`` while it is built and ``act_seconds`` per act
    (rounds a few a second, so a stall stands out from the rounds around it)."""

    def __init__(self, load_seconds: float = 0.0, act_seconds: float = 0.0, **kwargs: Any) -> None:
        time.sleep(load_seconds)
        super().__init__(**kwargs)
        self.act_seconds = act_seconds

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        time.sleep(self.act_seconds)
        return super().act(inputs, stage, greedy)
