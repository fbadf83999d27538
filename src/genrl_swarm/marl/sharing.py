"""Sharing parameters: a typed body for them, the checks before use, and the average.

Parameters from a peer are an untrusted payload like any other: before they are averaged in,
their tree must have exactly this team's leaves (count, shapes, dtypes) and every value must be
finite. A peer can still send bad but well-formed weights; the average dilutes them by the
number of peers, and ``max_norm`` bounds how far any one leaf may sit from this peer's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import jax
import msgspec
import numpy as np

from genrl_swarm.core.bodies import Array, Body, Version


class ParamsBody(Body, frozen=True, tag="marl_params"):
    """A team's actor and critic parameters, leaves in ``jax.tree.leaves`` order."""

    leaves: Annotated[tuple[Array, ...], msgspec.Meta(min_length=1, max_length=256)]
    policy_version: Version = 0

    @property
    def units(self) -> int:
        return len(self.leaves)


def to_body(params: Any, task_id: str, input_digest: str, version: int) -> ParamsBody:
    leaves = jax.device_get(jax.tree.leaves(params))
    return ParamsBody(task_id, input_digest, tuple(Array.of(np.asarray(x)) for x in leaves), version)


def problem(body: ParamsBody, own: Any, max_norm: float) -> str | None:
    """Why ``body`` cannot be averaged with ``own`` (a params tree), or None."""
    mine = jax.tree.leaves(own)
    if len(body.leaves) != len(mine):
        return f"{len(body.leaves)} parameter arrays, this team has {len(mine)}"
    for i, (theirs, ours) in enumerate(zip(body.leaves, mine)):
        if theirs.dtype != str(ours.dtype) or tuple(theirs.shape) != tuple(ours.shape):
            return f"parameter {i}: {theirs.dtype}{list(theirs.shape)}, expected {ours.dtype}{list(ours.shape)}"
        values = theirs.numpy()
        if not np.isfinite(values).all():
            return f"parameter {i}: not finite"
        if float(np.abs(values - np.asarray(ours)).max(initial=0.0)) > max_norm:
            return f"parameter {i}: more than {max_norm} away from this peer's"
    return None


def average(own: Any, bodies: Sequence[ParamsBody]) -> Any:
    """The mean of ``own`` and the peers' checked parameters, leaf by leaf."""
    treedef = jax.tree.structure(own)
    columns = zip(jax.tree.leaves(own), *[[a.numpy() for a in b.leaves] for b in bodies])
    return jax.tree.unflatten(treedef, [np.mean(np.stack([np.asarray(x) for x in column]), axis=0) for column in columns])


def unflatten(like: Any, body: ParamsBody) -> Any:
    """``body``'s leaves in the tree structure of ``like`` (check them with ``problem`` first)."""
    return jax.tree.unflatten(jax.tree.structure(like), [a.numpy() for a in body.leaves])
