"""The MARL paradigm's body: per-step arrays of one multi-agent episode (``Trajectory``).

Arrays travel as core's ``Array`` (raw bytes, dtype and shape checked before anything reads
them); a game declares each field's ``ArraySpec`` and ``violations`` names the first field
that differs. No JAX here: receivers decode and check trajectories before any replay.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

import msgspec

from genrl_swarm.core.bodies import MIN_COPY_UNITS, Array, ArraySpec, Body, Version


class Trajectory(Body, frozen=True, tag="trajectory"):
    """Per-step arrays of a multi-agent environment episode; every array's first dimension is
    ``steps``. Optional fields are empty arrays when a policy does not produce them."""

    steps: Annotated[int, msgspec.Meta(ge=1, le=1 << 20)]
    observations: Array
    actions: Array
    rewards: Array
    dones: Array
    action_masks: Array | None = None
    logprobs: Array | None = None
    values: Array | None = None
    policy_version: Version = 0

    FIELDS: ClassVar[tuple[str, ...]] = ("observations", "actions", "rewards", "dones", "action_masks", "logprobs", "values")

    @property
    def units(self) -> int:
        return self.steps

    def content_key(self) -> bytes | None:
        return self.actions.data if self.steps >= MIN_COPY_UNITS else None

    def __post_init__(self) -> None:
        for name in self.FIELDS:
            array = getattr(self, name)
            if array is not None and (not array.shape or array.shape[0] != self.steps):
                raise ValueError(f"trajectory.{name}: first dimension {array.shape[:1]} is not steps={self.steps}")

    def violations(self, spec: dict[str, ArraySpec]) -> str | None:
        """The first way this trajectory differs from ``spec`` (field -> dtype/step shape), or None."""
        for name in self.FIELDS:
            array, want = getattr(self, name), spec.get(name)
            if want is None:
                if array is not None and name not in ("observations", "actions", "rewards", "dones"):
                    return f"{name}: not declared by this game"
                continue
            if array is None:
                return f"{name}: missing"
            if array.dtype != want.dtype or tuple(array.shape[1:]) != tuple(want.step_shape):
                return f"{name}: {array.dtype}{list(array.shape[1:])} per step, expected {want.dtype}{list(want.step_shape)}"
        return None
