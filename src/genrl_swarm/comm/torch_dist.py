"""torch.distributed backend: one peer per rank (torchrun), gloo on CPU, NCCL on GPUs.

Each phase of an exchange (signed commitments, then payloads) is two all-gathers of raw bytes:
the announced lengths, then the bytes padded to one common width. Nothing is pickled
(``all_gather_object`` would unpickle what a rank sent). Every collective is asynchronous and
waited on with the exchange's deadline, so a rank that died or hangs turns into a
``SwarmFailure`` on the others instead of an endless wait.

Ranks are named peers ("rank-N" or configured). At start they all-gather (peer id, public key),
so ``ByteBackend`` checks each rank's signatures against the key that rank announced; the
all-gather itself authenticates the sender of each slot (slot i is what rank i sent).

A rank's announced length is never trusted for allocation: the width of the data all-gather is
computed from the gathered lengths by the same pure function on every rank (``layout``), lengths
over the phase's cap are excluded from it, so every rank calls the collective with one tensor
size and no honest rank allocates more than the cap per rank. Gloo cannot protect against a
rank that calls a collective with *another* tensor size than the agreed one: gloo's I/O thread
then aborts the receiving process (``op.preamble.length <= op.nbytes``). Only a rank running
modified collective code can do that; ranks of one torchrun job are one operator's processes.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist

from genrl_swarm.comm.base import ByteBackend, Phase, RawExchange
from genrl_swarm.comm.codec import DEFAULT_MAX_BYTES, MAX_RECORD_BYTES
from genrl_swarm.comm.epoch import EPOCH_BYTES, Epoch
from genrl_swarm.comm.errors import SwarmFailure
from genrl_swarm.comm.torchrun import under_torchrun
from genrl_swarm.core.identity import Identity, public_key_of

log = logging.getLogger(__name__)
#: A signed commitment is bounded by the codec (``open_commitment``): nothing bigger is read.
COMMIT_CAP = MAX_RECORD_BYTES + 256
KEY_BYTES = 32
MAX_PEER_ID_BYTES = 128


@dataclass(frozen=True)
class Layout:
    """How one all-gather of variable-length bytes is laid out. Decided from the gathered
    lengths alone, so every rank that runs this code calls the data collective with one width."""

    width: int  # bytes per rank in the data all-gather, at most the cap
    bad: dict[int, str]  # slot -> why that rank's bytes are not read


def layout(lengths: Sequence[int], cap: int) -> Layout:
    """Slots announcing a negative length or one over ``cap`` are dropped before anything is
    allocated; the width is the longest remaining length."""
    bad = {i: f"announced {n} bytes, outside 0..{cap}" for i, n in enumerate(lengths) if not 0 <= n <= cap}
    return Layout(max((n for i, n in enumerate(lengths) if i not in bad), default=0), bad)


@dataclass(frozen=True)
class Gathered:
    """One all-gather's result: bytes per slot (None for a dropped slot) and why slots were dropped."""

    blobs: list[bytes | None]
    bad: dict[int, str]


class TorchBackend(ByteBackend):
    def __init__(
        self,
        backend: Literal["auto", "gloo", "nccl"] = "auto",
        peer_id: str | None = None,
        group: Literal["world", "node"] = "world",
        init_timeout: float = 300.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        identity: Identity | None = None,
        swarm: str = "genrl-swarm",
    ) -> None:
        super().__init__(max_bytes, identity, swarm)
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
        size = dist.get_world_size(self._group)
        self.ranks = [dist.get_global_rank(self._group, i) if self._group is not None else i for i in range(size)]
        self.peer_ids = self._introduce(init_timeout)
        self._init_timeout = init_timeout

    @property
    def peer_id(self) -> str:
        return self._peer_id

    def _introduce(self, timeout: float) -> list[str]:
        """All-gather (public key, peer id) and fill ``self.keys``. A rank without a usable,
        unique identity leaves nothing to verify its records against: the swarm cannot start."""
        mine = self.identity.public_key + self._peer_id.encode()
        got = self._all_gather(mine, KEY_BYTES + MAX_PEER_ID_BYTES, time.monotonic() + timeout, "introductions")
        ids: list[str] = []
        for i, blob in enumerate(got.blobs):
            try:
                if blob is None:  # e.g. a peer id over MAX_PEER_ID_BYTES: every rank stops alike
                    raise ValueError(got.bad[i])
                key, name = blob[:KEY_BYTES], blob[KEY_BYTES:].decode()
                if len(key) != KEY_BYTES or not name:
                    raise ValueError("announced no public key or an empty peer id")
                if public_key_of(name) not in (None, key):
                    raise ValueError(f"claims peer id {name}, which embeds another public key than the one it announced")
            except (ValueError, UnicodeDecodeError) as e:
                raise SwarmFailure(f"rank {self.ranks[i]} has no usable identity: {e}. Restart the job with that rank fixed.") from e
            ids.append(name)
            self.keys[name] = key
        for what, values in (("peer id", ids), ("public key", [self.keys[p] for p in ids])):
            seen: dict[Any, int] = {}
            for i, value in enumerate(values):
                if value in seen:
                    raise SwarmFailure(
                        f"ranks {self.ranks[seen[value]]} and {self.ranks[i]} announce the same {what} "
                        f"({ids[i]}): give each rank its own peer id and identity"
                    )
                seen[value] = i
        return ids

    def vouches_for(self, peer: str) -> bool:
        return peer in self.peer_ids  # a rank of this job

    def agree_epoch(self) -> Epoch:
        """The group's first rank's epoch (its run directory's on ``--resume``, else drawn when it
        started), all-gathered before the first exchange: the ranks of one job are one operator's
        processes, so one of them speaks for the run, and every rank resumes its epoch with it."""
        got = self._all_gather(self.epoch.value, EPOCH_BYTES, time.monotonic() + self._init_timeout, "the epoch")
        first = got.blobs[0]
        if first is None or len(first) != EPOCH_BYTES:
            raise SwarmFailure(f"rank {self.ranks[0]} sent no epoch ({got.bad.get(0, 'wrong length')}): restart the job")
        return Epoch(first)

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

    def _all_gather(self, data: bytes, cap: int, deadline: float, what: str) -> Gathered:
        """Every rank's bytes, each at most ``cap``. Lengths first; the data collective's width
        comes from ``layout``, so a lying length costs its sender its slot, never a crash here."""
        size = dist.get_world_size(self._group)
        length = torch.tensor([len(data)], dtype=torch.int64, device=self.device)
        lengths_t = [torch.zeros_like(length) for _ in range(size)]
        self._wait(dist.all_gather(lengths_t, length, group=self._group, async_op=True), deadline, what)
        lengths = [int(n) for n in lengths_t]
        plan = layout(lengths, cap)
        me = dist.get_rank(self._group)
        if lengths[me] != len(data):
            log.error("%s: %s: this rank sent %d bytes but its length arrived as %d", self.peer_id, what, len(data), lengths[me])
        buffer = torch.zeros(plan.width, dtype=torch.uint8, device=self.device)
        mine = data[: plan.width] if me not in plan.bad else b""
        if mine:
            buffer[: len(mine)] = torch.frombuffer(bytearray(mine), dtype=torch.uint8).to(self.device)
        gathered = [torch.empty_like(buffer) for _ in range(size)]
        if plan.width:  # every rank computed the same plan: all skip an empty collective alike
            self._wait(dist.all_gather(gathered, buffer, group=self._group, async_op=True), deadline, what)
        bad, blobs = dict(plan.bad), []
        for i, (slot, n) in enumerate(zip(gathered, lengths)):
            if i not in bad and bool(slot[n:].any()):
                bad[i] = f"sent bytes past the {n} it announced"
            blobs.append(None if i in bad else slot[:n].cpu().numpy().tobytes())
        return Gathered(blobs, bad)

    def _exchange_bytes(
        self, round: int, stage: int, phase: Phase, data: bytes, timeout: float, wait_for: Collection[str] | None = None
    ) -> RawExchange:
        """Every rank is in every collective, so ``wait_for`` changes nothing here. A slot the
        transport rejected is handed on as empty bytes: ``ByteBackend`` then drops and counts
        that sender (this log line says why)."""
        what = f"{phase} r{round}/s{stage}"
        cap = COMMIT_CAP if phase == "commit" else self.codec.max_bytes
        got = self._all_gather(data, cap, time.monotonic() + timeout, what)
        for i, why in got.bad.items():
            log.warning("%s: %s: rank %d (%s) %s; its bytes are dropped", self.peer_id, what, self.ranks[i], self.peer_ids[i], why)
        payloads = {peer: blob if blob is not None else b"" for peer, blob in zip(self.peer_ids, got.blobs)}
        return RawExchange(payloads, expected=len(self.peer_ids))

    def close(self) -> None:
        # destroy_process_group waits on the peers; with a dead or hung one it would never return.
        if dist.is_initialized() and not self.failed:
            dist.destroy_process_group()
