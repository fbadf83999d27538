"""Importable by the rank processes the distributed tests start (PYTHONPATH=tests).

The hostile backends play rank 1 misbehaving through the real gloo transport. The length
attacks rewrite what rank 1 announces on the wire (``torch.distributed.all_gather`` of the
one-element length tensor), so they hit any torch backend that announces lengths, old or new.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import torch
import torch.distributed as dist

from genrl_swarm.comm.base import Phase, RawExchange
from genrl_swarm.comm.codec import encode_signed, open_commitment
from genrl_swarm.comm.torch_dist import TorchBackend
from genrl_swarm.core import Body, StageInput
from genrl_swarm.core.identity import Identity
from genrl_swarm.games.bandit import SoftmaxPolicy

HOSTILE = 1  # the rank that misbehaves


class SlowPolicy(SoftmaxPolicy):
    """The bandit policy, slowed so a test can act while a round is in flight; while the file
    ``hold`` (if given) exists it does not act at all, so a test can keep a swarm from ending."""

    def __init__(self, delay: float = 0.3, hold: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delay = delay
        self.hold = Path(hold) if hold else None

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        time.sleep(self.delay)
        while self.hold is not None and self.hold.exists():
            time.sleep(0.05)
        return super().act(inputs, stage, greedy)


class CorruptingBackend(TorchBackend):
    """Rank 1 commits properly, then reveals bytes that are not a payload."""

    def _exchange_bytes(
        self, round: int, stage: int, phase: Phase, data: bytes, timeout: float, wait_for: Collection[str] | None = None
    ) -> RawExchange:
        bad = self.rank == HOSTILE and phase == "reveal"
        return super()._exchange_bytes(round, stage, phase, b"\xde\xad\xbe\xef" if bad else data, timeout, wait_for)


@contextmanager
def announcing(change: Callable[[int], int]) -> Iterator[None]:
    """Inside the block, every length this rank all-gathers goes out as ``change(length)``."""
    real = dist.all_gather

    def lying(outputs: list[torch.Tensor], tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if tensor.dtype == torch.int64 and tensor.numel() == 1:
            tensor = torch.tensor([change(int(tensor))], dtype=torch.int64, device=tensor.device)
        return real(outputs, tensor, *args, **kwargs)

    dist.all_gather = lying  # type: ignore[assignment]
    try:
        yield
    finally:
        dist.all_gather = real


class LyingLengthBackend(TorchBackend):
    """Rank 1 announces lengths other than the bytes it sends, in every phase of every exchange.

    ``huge``: 2**62 bytes. ``short``: it sends its payload and 2 KiB more, announcing 16 bytes
    less than the payload alone: its bytes overrun both its announcement and the longest slot.
    """

    def __init__(self, lie: str = "huge", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lie = lie

    def _exchange_bytes(
        self, round: int, stage: int, phase: Phase, data: bytes, timeout: float, wait_for: Collection[str] | None = None
    ) -> RawExchange:
        if self.rank != HOSTILE:
            return super()._exchange_bytes(round, stage, phase, data, timeout, wait_for)
        if self.lie == "huge":
            change: Callable[[int], int] = lambda n: 2**62  # noqa: E731
        else:
            data, change = data + b"\xff" * 2048, (lambda n: n - 2048 - 16)
        with announcing(change):
            return super()._exchange_bytes(round, stage, phase, data, timeout, wait_for)


class ForgingBackend(TorchBackend):
    """Rank 1 forges its commitments. ``other-key``: signed with a key it never announced.
    ``other-id``: the record names rank-0 as its sender (signed with rank 1's own key)."""

    def __init__(self, forge: str = "other-key", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.forge, self.stranger = forge, Identity.generate()

    def _exchange_bytes(
        self, round: int, stage: int, phase: Phase, data: bytes, timeout: float, wait_for: Collection[str] | None = None
    ) -> RawExchange:
        if self.rank == HOSTILE and phase == "commit":
            record = open_commitment(data, lambda message, signature: True)
            if self.forge == "other-key":
                data = encode_signed("commit", record, self.stranger.sign)
            else:
                data = encode_signed("commit", msgspec.structs.replace(record, sender="rank-0"), self.identity.sign)
        return super()._exchange_bytes(round, stage, phase, data, timeout, wait_for)


class ImpostorBackend(TorchBackend):
    """Rank 1 calls itself by a libp2p peer id whose key it does not hold (the id embeds another key)."""

    def __init__(self, **kwargs: Any) -> None:
        if int(os.environ["RANK"]) == HOSTILE:
            kwargs["peer_id"] = Identity.from_seed(bytes(32)).peer_id
        super().__init__(**kwargs)
