"""torch.distributed backend: one peer per rank (torchrun), gloo on CPU, NCCL on GPUs.

An exchange is two all-gathers of raw bytes: the payload lengths, then the payloads padded
to the longest. Nothing is pickled (``all_gather_object`` would unpickle what a rank sent).
Every collective is asynchronous and waited on with the exchange's deadline, so a rank that
died or hangs turns into a ``SwarmFailure`` on the others instead of an endless wait.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from typing import Any, Literal

import torch
import torch.distributed as dist

from genrl_swarm.comm.base import ByteBackend, RawExchange
from genrl_swarm.comm.codec import DEFAULT_MAX_BYTES
from genrl_swarm.comm.errors import SwarmFailure

log = logging.getLogger(__name__)


def under_torchrun() -> bool:
    """True in a process started by torchrun (or with the same environment set by hand)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ)


class TorchBackend(ByteBackend):
    def __init__(
        self,
        backend: Literal["auto", "gloo", "nccl"] = "auto",
        peer_id: str | None = None,
        group: Literal["world", "node"] = "world",
        init_timeout: float = 300.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        super().__init__(max_bytes)
        if not under_torchrun():
            raise SwarmFailure(
                "TorchBackend needs torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): "
                "start it with scripts/train.sh or torchrun, or use the in-memory backend"
            )
        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
        self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if backend == "nccl" else torch.device("cpu")
        if not dist.is_initialized():
            try:
                dist.init_process_group(backend, timeout=datetime.timedelta(seconds=init_timeout))
            except (RuntimeError, ValueError) as e:
                where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
                raise SwarmFailure(f"cannot join the process group at {where} within {init_timeout:.0f}s: {e}") from e
        self.rank = dist.get_rank()
        self._group: Any = None
        if group == "node":
            per_node = int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size()))
            self._group, _ = dist.new_subgroups(group_size=per_node)  # type: ignore[no-untyped-call]
        self.failed = False  # after a failed collective the group is unusable, even to tear down
        self._peer_id = peer_id or f"rank-{self.rank}"
        self.peer_ids = [p.decode() for p in self._all_gather(self._peer_id.encode(), init_timeout, "peer ids")]
        if len(set(self.peer_ids)) != len(self.peer_ids):
            raise SwarmFailure(f"peer ids are not unique across ranks: {self.peer_ids}")

    @property
    def peer_id(self) -> str:
        return self._peer_id

    def _wait(self, work: Any, deadline: float, what: str) -> None:
        remaining = max(deadline - time.monotonic(), 0.001)
        try:
            ok = work.wait(timeout=datetime.timedelta(seconds=remaining))
        except RuntimeError as e:  # gloo: a peer closed its connection (died) or the wait timed out
            raise SwarmFailure(self._failure(what, str(e))) from e
        if ok is False:
            raise SwarmFailure(self._failure(what, "timed out"))

    def _failure(self, what: str, cause: str) -> str:
        self.failed = True
        return (
            f"{self.peer_id}: {what} failed: a rank died or stopped answering ({cause.splitlines()[0][:200]}). "
            f"This rank stops; restart the job (torchrun --max-restarts, or scripts/train.sh again with --resume)."
        )

    def _all_gather(self, data: bytes, timeout: float, what: str) -> list[bytes]:
        deadline = time.monotonic() + timeout
        size = dist.get_world_size(self._group)
        length = torch.tensor([len(data)], dtype=torch.int64, device=self.device)
        lengths = [torch.zeros_like(length) for _ in range(size)]
        self._wait(dist.all_gather(lengths, length, group=self._group, async_op=True), deadline, what)
        longest = max(int(n) for n in lengths)
        if longest > self.codec.max_bytes:
            log.warning("%s: a rank announced %d bytes (limit %d); its payload will be dropped", self.peer_id, longest, self.codec.max_bytes)
        buffer = torch.zeros(longest, dtype=torch.uint8, device=self.device)
        buffer[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else buffer[:0]
        gathered = [torch.empty_like(buffer) for _ in range(size)]
        self._wait(dist.all_gather(gathered, buffer, group=self._group, async_op=True), deadline, what)
        return [bytes(g[: int(n)].cpu().numpy().tobytes()) for g, n in zip(gathered, lengths)]

    def _exchange_bytes(self, round: int, stage: int, data: bytes, timeout: float) -> RawExchange:
        blobs = self._all_gather(data, timeout, f"exchange r{round}/s{stage}")
        return RawExchange(dict(zip(self.peer_ids, blobs)), expected=len(self.peer_ids))

    def close(self) -> None:
        # destroy_process_group waits on the peers; with a dead or hung one it would never return.
        if dist.is_initialized() and not self.failed:
            dist.destroy_process_group()
