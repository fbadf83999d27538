"""Sharing parameters: a typed body for them, the checks before use, and the robust average.

Parameters from a peer are an untrusted payload like any other: before they are averaged in,
their tree must have exactly this team's leaves (count, shapes, dtypes), every value must be
finite, and every array must sit near this peer's own *relative to that array's size*:
``||theirs - own|| <= max_distance * (||own|| + FLOOR * sqrt(n))`` (L2 norms over the array's
``n`` values; the floor keeps zero-initialised biases and small heads checkable). Honest peers
that averaged last round differ by one round of updates, a few hundredths of that bound; a
body moved by a sizeable fraction of the weights' own scale is refused.

A peer can still send a body just inside the bound. So the peers' parameters are combined by a
coordinate-wise **median** of this peer's own and at most ``max_peers`` accepted peers (the
closest ones), not a mean: with one liar and one honest peer the median of the three ignores
the liar. With a single peer the median of two is their mean, so one liar among two peers
still gets half the weight, inside the relative bound each round.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import jax
import msgspec
import numpy as np

from genrl_swarm.core.bodies import Array, Body, Version

#: Per-value floor (RMS) added to an array's own norm in the distance check: an array of zeros
#: (a fresh bias) still lets honest peers' first updates through, not arbitrary values.
FLOOR = 0.05


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


def relative_distance(theirs: np.ndarray, ours: np.ndarray) -> float:
    """``||theirs - ours|| / (||ours|| + FLOOR * sqrt(n))`` over one array (float64 norms)."""
    ours = np.asarray(ours, dtype=np.float64)
    scale = float(np.linalg.norm(ours.ravel())) + FLOOR * float(np.sqrt(max(ours.size, 1)))
    return float(np.linalg.norm((np.asarray(theirs, dtype=np.float64) - ours).ravel())) / scale


def distance(body: ParamsBody, own: Any) -> float:
    """The largest relative distance of ``body``'s arrays from ``own``'s (shapes checked first)."""
    return max((relative_distance(a.numpy(), np.asarray(x)) for a, x in zip(body.leaves, jax.tree.leaves(own))), default=0.0)


def problem(body: ParamsBody, own: Any, max_distance: float) -> str | None:
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
        d = relative_distance(values, np.asarray(ours))
        if not d <= max_distance:
            return f"parameter {i}: {d:.3g} away from this peer's (relative), more than {max_distance}"
    return None


def aggregate(own: Any, bodies: Sequence[ParamsBody], max_peers: int | None = None) -> Any:
    """The coordinate-wise median of ``own`` and the (checked) peers' parameters, leaf by leaf,
    using at most ``max_peers`` of them, the closest to ``own`` first."""
    chosen = list(bodies)
    if max_peers is not None and len(chosen) > max_peers:
        chosen = sorted(chosen, key=lambda b: distance(b, own))[: max(max_peers, 0)]
    treedef = jax.tree.structure(own)
    columns = zip(jax.tree.leaves(own), *[[a.numpy() for a in b.leaves] for b in chosen])
    out = []
    for column in columns:
        first = np.asarray(column[0])
        out.append(np.median(np.stack([np.asarray(x) for x in column]), axis=0).astype(first.dtype))
    return jax.tree.unflatten(treedef, out)


def unflatten(like: Any, body: ParamsBody) -> Any:
    """``body``'s leaves in the tree structure of ``like`` (check them with ``problem`` first)."""
    return jax.tree.unflatten(jax.tree.structure(like), [a.numpy() for a in body.leaves])
