"""The MARL learner: one PPO update a round on this peer's own rollout plus the verified
trajectories of the swarm (off-policy weighted), or on its own after a coordinate-wise median of
the peers' parameters; held-out evaluation and marl-eval logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import flax.serialization
import jax
import numpy as np

from genrl_swarm.core import (
    GameState,
    Learner,
    Rollout,
    RoundRewards,
    Weights,
)
from genrl_swarm.paradigms.marl import sharing
from genrl_swarm.paradigms.marl.config import derive_seed
from genrl_swarm.paradigms.marl.logs import MarlEvalLog
from genrl_swarm.paradigms.marl.policy import MarlPolicy
from genrl_swarm.paradigms.marl.replay import verifier_for
from genrl_swarm.paradigms.marl.team import Batch, TrainState, batch_of, side_by_side


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
