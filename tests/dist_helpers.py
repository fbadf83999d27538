"""Importable by the rank processes the distributed tests start (PYTHONPATH=tests)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from genrl_swarm.comm.base import RawExchange
from genrl_swarm.comm.torch_dist import TorchBackend
from genrl_swarm.core import Body, StageInput
from genrl_swarm.games.bandit import SoftmaxPolicy


class SlowPolicy(SoftmaxPolicy):
    """The bandit policy, slowed so a test can act while a round is in flight."""

    def __init__(self, delay: float = 0.3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delay = delay

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        time.sleep(self.delay)
        return super().act(inputs, stage, greedy)


class CorruptingBackend(TorchBackend):
    """Rank 1 sends bytes that are not a payload; the real transport carries them."""

    def _exchange_bytes(self, round: int, stage: int, data: bytes, timeout: float) -> RawExchange:
        return super()._exchange_bytes(round, stage, b"\xde\xad\xbe\xef" if self.rank == 1 else data, timeout)
