"""The MARL policy: acts with the team's actor on a round's environments and shares its
trajectory, or its parameters (``share``); checks what peers share before the loop stores it
(a trajectory is replayed from the task's seed with its actions; parameters must match this
team's shapes, be finite and near its own)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import flax.serialization
import jax
import numpy as np

from genrl_swarm.core import Body, Policy, StageInput, Weights
from genrl_swarm.paradigms.marl import sharing
from genrl_swarm.paradigms.marl.bodies import Trajectory
from genrl_swarm.paradigms.marl.config import EnvConfig, SystemConfig
from genrl_swarm.paradigms.marl.replay import ReplayError, env_keys, to_body, verifier_for
from genrl_swarm.paradigms.marl.team import Params, team_for
from genrl_swarm.paradigms.marl.team import Rollout as TeamRollout

Share = Literal["trajectories", "parameters", "none"]


class MarlPolicy(Policy):
    """Acts with the team's actor on a round's environments; shares its trajectory, or its
    parameters (``share``), and checks what peers share before the loop stores it."""

    body_type: type[Body] = Trajectory

    def __init__(
        self,
        env: EnvConfig | Mapping[str, Any],
        system: SystemConfig | Mapping[str, Any],
        share: Share = "trajectories",
        seed: int = 0,
        init_seed: int = 0,
        max_param_distance: float = 0.5,
    ) -> None:
        self.env, self.system, self.share = EnvConfig.of(env), SystemConfig.of(system), share
        if self.share == "parameters":
            self.body_type = sharing.ParamsBody  # this instance trades parameters
        self.team = team_for(self.env, self.system)
        self.params: Params = self.team.init(jax.random.PRNGKey(init_seed)).params  # same init_seed: averageable
        self.key = jax.random.fold_in(jax.random.PRNGKey(seed), 0)  # acting; the learner's stream is fold_in 1
        self.max_param_distance = max_param_distance
        self.version = 0
        #: This round's own rollouts by task id (the learner trains on them whatever is shared).
        self.collected: dict[str, TeamRollout] = {}
        self._sent: list[Body] = []

    def _next_key(self) -> jax.Array:
        self.key, key = jax.random.split(self.key)
        return key

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        bodies: list[Body] = []
        self.collected = {}
        for inp in inputs:
            ctx = inp.context
            rollout = self.team.collect(
                self.params.actor, env_keys(ctx["seed"], ctx["num_envs"]), self._next_key(), steps=ctx["steps"], greedy=greedy
            )
            self.collected[inp.task_id] = rollout
            verifier_for(self.env, ctx["num_envs"], ctx["steps"]).remember(ctx["seed"], rollout)
            if self.share == "parameters":
                bodies.append(sharing.to_body(self.params, inp.task_id, inp.digest, self.version))
            else:
                bodies.append(to_body(rollout, inp.task_id, inp.digest, self.version))
        self._sent = bodies
        return bodies

    def check(self, body: Body, input: StageInput) -> str | None:
        if any(body is mine for mine in self._sent):
            return None  # this peer's own body, inserted by the loop as built: nothing to verify
        ctx = input.context
        if isinstance(body, sharing.ParamsBody):
            return sharing.problem(body, self.params, self.max_param_distance)
        assert isinstance(body, Trajectory)
        try:
            verifier_for(self.env, ctx["num_envs"], ctx["steps"]).verify(body, ctx["seed"])
        except ReplayError as e:
            return f"replay: {e}"
        return None

    def load_weights(self, weights: Weights) -> None:
        self.params, self.version = weights.state, weights.version

    def save(self, directory: Path) -> None:
        (directory / "params.msgpack").write_bytes(flax.serialization.to_bytes(self.params))
        state = {"key": np.asarray(jax.random.key_data(self.key)).tolist(), "version": self.version}
        (directory / "policy.json").write_text(json.dumps(state))

    def load(self, directory: Path) -> None:
        self.params = flax.serialization.from_bytes(self.params, (directory / "params.msgpack").read_bytes())
        saved = json.loads((directory / "policy.json").read_text())
        self.key, self.version = jax.numpy.asarray(saved["key"], dtype=jax.numpy.uint32), saved["version"]
