"""Weight sync from the learner to the rollout workers.

On CPU the learner publishes its trainable tensors as numpy arrays through Ray's object store
(one ``ray.put``-backed return value; workers on the same node map it without a copy) and each
worker copies them into its own module when the version is newer. Only trainable parameters
travel: with LoRA those are the adapters.

On GPUs, ``NcclSync`` broadcasts the same tensors from the learner (rank 0) to the workers over
a ``ray.util.collective`` NCCL group. It is written against Ray's collective API but has NOT
been run here (no GPU on the development machines); it refuses to start without CUDA.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import ray
import torch

#: What the object store carries: parameter name -> array (numpy; a tensor for bfloat16).
State = dict[str, Any]


def export_state(model: torch.nn.Module, trainable_only: bool = True) -> State:
    """The tensors to ship: trainable parameters only, or the whole state dict."""
    if trainable_only:
        named = {n: p for n, p in model.named_parameters() if p.requires_grad}
    else:
        named = dict(model.state_dict())
    return {n: _to_wire(t) for n, t in named.items()}


def _to_wire(t: torch.Tensor) -> Any:
    t = t.detach().to("cpu")
    return t.clone() if t.dtype == torch.bfloat16 else t.numpy().copy()  # numpy has no bfloat16


@torch.no_grad()
def import_state(model: torch.nn.Module, state: State) -> None:
    """Copy ``state`` into ``model`` (names must exist; shapes must match)."""
    own = dict(model.named_parameters()) | dict(model.named_buffers())
    missing = [n for n in state if n not in own]
    if missing:
        raise ValueError(f"weights name {len(missing)} tensors this model lacks, e.g. {missing[0]!r}")
    with warnings.catch_warnings():  # object-store arrays are read-only; they are only read here
        warnings.simplefilter("ignore", UserWarning)
        for name, value in state.items():
            source = torch.from_numpy(np.asarray(value)) if isinstance(value, np.ndarray) else value
            own[name].copy_(source.to(own[name].device, own[name].dtype))


def fetch(box: list[Any], timeout: float) -> State:
    """The state behind an ObjectRef passed nested in a list (so Ray did not resolve it
    eagerly: a worker that already has this version never fetches it)."""
    state = ray.get(box[0], timeout=timeout)
    assert isinstance(state, dict)
    return state


class NcclSync:
    """Broadcast of trainable tensors from the learner to every worker (GPUs only; untested here).

    Every member calls ``setup`` with the same ``group_name`` and world size (learner = rank 0),
    then ``broadcast(model)`` after each update: the learner sends its tensors in place, the
    workers receive into theirs, in ``named_parameters`` order, which equal models share."""

    def __init__(self, world_size: int, rank: int, group_name: str = "genrl_swarm_weights") -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("pipeline.weight_sync=nccl needs CUDA on every actor; use object_store on CPU")
        from ray.util import collective

        self.collective, self.group_name, self.rank = collective, group_name, rank
        collective.init_collective_group(world_size, rank, backend="nccl", group_name=group_name)  # type: ignore[arg-type]  # Ray accepts the name

    @torch.no_grad()
    def broadcast(self, model: torch.nn.Module, trainable_only: bool = True) -> None:
        for _, p in model.named_parameters():
            if p.requires_grad or not trainable_only:
                self.collective.broadcast(p.data, src_rank=0, group_name=self.group_name)
                # NCCL writes the storage behind autograd's back: bump the in-place counter, or
                # a bf16 sampling copy keyed on it (lm/sampling_model.py) would keep old weights.
                torch.autograd.graph.increment_version(p)

    def close(self) -> None:
        self.collective.destroy_collective_group(self.group_name)
