"""Multi-agent RL in the swarm: each peer trains its own team with IPPO or MAPPO on a Jumanji
environment (Level-Based Foraging, Robot Warehouse) and shares, each round, its trajectories
or its parameters.

A round is one PPO update. Its task is a seed: every peer resets ``num_envs`` environments from
it and plays ``rollout_length`` steps with its own policy (``MarlPolicy.act``). What crosses the
wire is the typed ``Trajectory`` (observations, actions, rewards, dones, masks, behaviour
log-probs) or a ``ParamsBody`` (``policy.share``). A received trajectory is replayed from the
task's seed with its actions before anything uses it (``MarlPolicy.check``): any mismatch
refuses it, counted against the sender. Received parameters must match this team's shapes and
dtypes, be finite and near this peer's own (relative to each array's norm); they are combined
by a coordinate-wise median. Rewards are this peer's replay of the environment
(``MarlReward``). The learner trains on its own rollout plus the verified ones (off-policy
weighted), or on its own after averaging in the peers' parameters.

The machinery (networks, GAE/PPO, wrappers, replay) lives in ``genrl_swarm.marl``; this file
only plugs it into the loop.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import flax.serialization
import jax
import numpy as np

from genrl_swarm.core import (
    Body,
    DataManager,
    GameState,
    Learner,
    Policy,
    RewardManager,
    Rollout,
    RoundRewards,
    StageInput,
    Task,
    Trajectory,
    Weights,
)
from genrl_swarm.marl import sharing
from genrl_swarm.marl.config import EnvConfig, SystemConfig
from genrl_swarm.marl.logs import MarlEvalLog
from genrl_swarm.marl.replay import ReplayError, env_keys, to_body, verifier_for
from genrl_swarm.marl.team import Batch, Params, TrainState, batch_of, mean_return, side_by_side, team_for
from genrl_swarm.marl.team import Rollout as TeamRollout

Share = Literal["trajectories", "parameters", "none"]


def derive_seed(*parts: object) -> int:
    """A 31-bit seed from anything printable: the same on every peer and in every process."""
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:4], "little") >> 1


class MarlData(DataManager):
    """One task per round: a seed for the round's environments, and what they are."""

    def __init__(self, env: EnvConfig | Mapping[str, Any], num_envs: int = 16, rollout_length: int = 128, seed: int = 0) -> None:
        self.env, self.num_envs, self.rollout_length, self.seed = EnvConfig.of(env), num_envs, rollout_length, seed

    def round_tasks(self, round: int) -> list[Task]:
        public = {
            "seed": derive_seed(self.seed, "round", round), "env": self.env.env_name, "scenario": self.env.task.name,
            "num_envs": self.num_envs, "steps": self.rollout_length,
        }  # fmt: skip
        return [Task.create(f"{self.env.env_name} {self.env.task.name} round {round}", public=public)]


class MarlReward(RewardManager):
    """A body's mean team return, as this peer measures it: its own replay of a trajectory, or
    the sent parameters played on the task's environments."""

    def __init__(self, env: EnvConfig | Mapping[str, Any], system: SystemConfig | Mapping[str, Any]) -> None:
        self.env, self.system = EnvConfig.of(env), SystemConfig.of(system)

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        ctx, body = input.context, rollout.body
        if isinstance(body, Trajectory):
            return [verifier_for(self.env, ctx["num_envs"], ctx["steps"]).verify(body, ctx["seed"]).mean_return()]
        team = team_for(self.env, self.system)
        params = sharing.unflatten(team.template, body)
        played = team.collect(params.actor, env_keys(ctx["seed"], ctx["num_envs"]), jax.random.PRNGKey(ctx["seed"]), steps=ctx["steps"])
        s = jax.device_get(played.steps)
        return [mean_return(s.done, s.returned, s.reward)]


class MarlPolicy(Policy):
    """Acts with the team's actor on a round's environments; shares its trajectory, or its
    parameters (``share``), and checks what peers share before the loop stores it."""

    body_type = Trajectory

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
            self.body_type = sharing.ParamsBody  # type: ignore[assignment,misc]  # this instance trades parameters
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


class MarlLearner(Learner):
    """One PPO update per round on this peer's rollout, plus up to ``max_shared`` peers'
    verified trajectories (weighted by min(pi / pi_sender, is_cap)), or after averaging in the
    peers' checked parameters (a coordinate-wise median with up to ``max_shared`` of them).
    Evaluates every ``eval_every`` rounds into marl-eval JSON."""

    def __init__(
        self,
        policy: MarlPolicy,
        seed: int = 0,
        max_shared: int = 3,
        eval_every: int = 10,
        eval_episodes: int = 32,
        eval_greedy: bool = False,
        total_rounds: int = 0,
        log_dir: str | None = None,
        swarm_seed: int = 0,
    ) -> None:
        if max_shared < 0 or eval_every < 0 or eval_episodes < 1:
            raise ValueError("max_shared and eval_every must be >= 0 and eval_episodes >= 1")
        self.policy, self.team = policy, policy.team
        self.max_shared = max_shared if policy.share == "trajectories" else 0
        self.max_averaged = max_shared if policy.share == "parameters" else 0  # peers in the median
        self.eval_every, self.eval_episodes, self.eval_greedy, self.total_rounds = eval_every, eval_episodes, eval_greedy, total_rounds
        opt = self.team.init(jax.random.PRNGKey(0))
        self.state = TrainState(policy.params, opt.actor_opt, opt.critic_opt)
        self.key = jax.random.fold_in(jax.random.PRNGKey(seed), 1)  # minibatch order; not the policy's stream
        self.eval_key = jax.random.PRNGKey(derive_seed(swarm_seed, "eval"))  # the same held-out episodes for every peer
        self.env_steps = 0
        env, system = policy.env, policy.system
        self.log = None if log_dir is None else MarlEvalLog(
            Path(log_dir) / f"{system.name}_seed_{seed}.json", env.env_name, env.task.name, system.name, seed
        )  # fmt: skip

    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        own = [s.rollout for s in rewards.scored if s.rollout.peer_id == state.peer_id]
        peers = [s.rollout for s in rewards.scored if s.rollout.peer_id != state.peer_id]
        params, averaged = self.state.params, 0
        if self.policy.share == "parameters" and peers:
            params = sharing.aggregate(params, [r.body for r in peers], self.max_averaged)
            averaged = min(len(peers), self.max_averaged)
        mine = [batch_of(self.policy.collected[r.task_id]) for r in own if r.task_id in self.policy.collected]
        if not mine:
            return {}
        theirs = [self._replayed(state, r) for r in peers[: self.max_shared]]
        batch = side_by_side([*mine, *theirs], len(mine) + self.max_shared)
        self.key, key = jax.random.split(self.key)
        self.state, metrics = self.team.update(self.state._replace(params=params), batch, key)
        self.env_steps += sum(int(np.prod(b.done.shape)) for b in mine)  # this peer's own steps only
        out = {f"train/{k}": float(v) for k, v in jax.device_get(metrics).items()}
        out |= {"train/env_steps": float(self.env_steps), "swarm/trajectories_used": float(len(theirs)), "swarm/params_averaged": float(averaged)}
        return out | self._evaluate(state.round)

    def _replayed(self, state: GameState, rollout: Rollout[Any]) -> Batch:
        """A peer's trajectory as this peer replayed it (its rewards, its observations)."""
        body, ctx = rollout.body, state.input_for(rollout).context
        replayed = verifier_for(self.policy.env, ctx["num_envs"], ctx["steps"]).verify(body, ctx["seed"])
        return replayed.batch(body.actions.numpy(), body.logprobs.numpy())

    def _evaluate(self, round: int) -> dict[str, float]:
        last = round == self.total_rounds - 1
        if not (last or (self.eval_every > 0 and (round + 1) % self.eval_every == 0)):
            return {}
        returns = np.asarray(self.team.evaluate(self.state.params.actor, self.eval_key, self.eval_episodes, self.eval_greedy))
        if self.log is not None:
            self.log.record(self.env_steps, returns.tolist())
            if last:  # Mava's absolute metric: the final policy on 10x the evaluation episodes
                self.log.record_absolute(
                    np.asarray(self.team.evaluate(self.state.params.actor, self.eval_key, self.eval_episodes * 10, self.eval_greedy)).tolist()
                )
        return {"eval/reward": float(returns.mean()), "eval/return_std": float(returns.std())}

    def weights(self) -> Weights:
        return Weights(self.policy.version + 1, self.state.params)

    def save(self, directory: Path) -> None:
        (directory / "train_state.msgpack").write_bytes(flax.serialization.to_bytes(self.state))
        state = {"key": np.asarray(self.key).tolist(), "env_steps": self.env_steps}
        (directory / "learner.json").write_text(json.dumps(state))

    def load(self, directory: Path) -> None:
        self.state = flax.serialization.from_bytes(self.state, (directory / "train_state.msgpack").read_bytes())
        saved = json.loads((directory / "learner.json").read_text())
        self.key, self.env_steps = jax.numpy.asarray(saved["key"], dtype=jax.numpy.uint32), saved["env_steps"]
