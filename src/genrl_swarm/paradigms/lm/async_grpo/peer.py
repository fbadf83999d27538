"""AsyncGRPOLearner: the Ray pipeline behind the game's Learner interface (``trainer=async_grpo``).

The game loop stays as it is: each round the peer acts (on a rollout worker with
``pipeline.act_on_workers``, else itself) with the newest weights, exchanges with the swarm and
scores locally. ``train`` does not train: it writes the round's scored groups, own
and the swarm's, into the pipeline's buffer (the swarm's arrive as they come, like the workers'
generations) and returns the metrics of the updates the learner actor finished meanwhile;
``weights`` copies the newest published weights into the peer's policy. Between rounds the
rollout workers keep generating on their own task draws and the learner keeps training.

Ray is imported only when the learner is built, so a recipe validates without it.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from genrl_swarm.core import DataManager, GameState, Learner, Policy, RewardManager, RoundRewards, TokenRollout, Weights
from genrl_swarm.paradigms.lm.async_grpo.buffer import Group
from genrl_swarm.paradigms.lm.async_grpo.config import PipelineConfig, RayConfig
from genrl_swarm.paradigms.lm.decoder import base_model
from genrl_swarm.paradigms.lm.learner import GRPOConfig
from genrl_swarm.paradigms.lm.policy import LMPolicy


def policy_kwargs(policy: LMPolicy, model: str | None = None) -> dict[str, Any]:
    """What a replica of ``policy`` is built from (on another process or node). With LoRA the
    replicas carry the same adapters on the same base weights, so only the adapters travel
    (``weight_sync.export_state`` ships trainable tensors); their random initial A matrices
    differ until the first publish, which changes nothing the replicas compute (B starts at 0)."""
    config = getattr(base_model(policy.model), "config", None)
    path = model or str(getattr(config, "_name_or_path", "") or getattr(policy.model, "name_or_path", ""))
    lora = {"lora": asdict(policy.lora)} if policy.lora is not None and policy.lora.r > 0 else {}
    return {"model": path, "sampling": asdict(policy.sampling), "system_prompt": policy.system_prompt} | lora


class AsyncGRPOLearner(Learner):
    def __init__(self, policy: LMPolicy, grpo: GRPOConfig | Mapping[str, Any] | None = None, seed: int = 0,
                 pipeline: PipelineConfig | Mapping[str, Any] | None = None, ray: RayConfig | Mapping[str, Any] | None = None,
                 data: DataManager | None = None, reward: RewardManager | None = None) -> None:  # fmt: skip
        self.cfg = pipeline if isinstance(pipeline, PipelineConfig) else PipelineConfig(**(pipeline or {}))
        ray_cfg = ray if isinstance(ray, RayConfig) else RayConfig(**(ray or {}))
        grpo_cfg = grpo if isinstance(grpo, GRPOConfig) else GRPOConfig(**(grpo or {}))
        if self.cfg.num_workers and (data is None or reward is None):
            raise ValueError("pipeline.num_workers must be 0 without learner.data and learner.reward (trainer=async_grpo sets them)")
        from genrl_swarm.paradigms.lm.async_grpo.pipeline import AsyncPipeline  # Ray, only now

        self.policy = policy
        self.pipe = AsyncPipeline.start(self.cfg, policy_kwargs(policy, self.cfg.model), asdict(grpo_cfg), data or _NoData(),
                                        reward or _NoReward(), seed, ray_cfg)  # fmt: skip
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._resume()
        atexit.register(self.close)

    # ------------------------------------------------------------------ the loop in the background
    def _loop(self) -> None:
        try:
            self.pipe.run(stop=self._stop)
        except BaseException as e:  # noqa: BLE001 - handed to the game thread by the next train()
            self._error = e

    def _resume(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="async-grpo-driver", daemon=True)
        self._thread.start()

    def _pause(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.cfg.timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"async_grpo: the driver loop did not pause within {self.cfg.timeout:.0f}s")
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"async_grpo pipeline failed: {type(self._error).__name__}: {self._error}") from self._error

    # ------------------------------------------------------------------ Learner
    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        """Buffer this round's groups (own at the version that sampled them; the swarm's at the
        learner's current version, since their own count another policy's updates)."""
        self._raise()
        groups = []
        for s in rewards.scored:
            body = s.rollout.body
            if not isinstance(body, TokenRollout):
                continue
            own = s.rollout.peer_id == state.peer_id
            version = body.policy_version if own else self.pipe.version
            groups.append(Group(body, s.rewards, version, "peer" if own else s.rollout.peer_id, not own, s.rollout.texts))
        self.pipe.put(groups)
        return self.pipe.latest_metrics() | {"async/put_groups": float(len(groups))}

    def acting_policy(self, policy: Policy) -> Policy:
        """With ``pipeline.act_on_workers`` and workers, the game's rounds are sampled on them."""
        if not (self.cfg.act_on_workers and self.cfg.num_workers) or not isinstance(policy, LMPolicy):
            return policy
        from genrl_swarm.paradigms.lm.async_grpo.acting import WorkerPolicy

        return WorkerPolicy(policy, self.pipe)

    def weights(self) -> Weights:
        """The newest published weights, copied into the peer's policy (handed back as its module)."""
        from genrl_swarm.paradigms.lm.async_grpo.weight_sync import import_state

        version, state = self.pipe.weights()
        if state is not None and version != self.policy.version:
            import_state(self.policy.model, state)
        return Weights(version, self.policy.model)

    def save(self, directory: Path) -> None:
        self._pause()
        try:
            self.pipe.save(Path(directory) / "pipeline")
        finally:
            self._resume()

    def load(self, directory: Path) -> None:
        self._pause()
        try:
            self.pipe.load(Path(directory) / "pipeline")
        finally:
            self._resume()

    def close(self) -> None:
        """Stop the driver and free the actors (also at exit)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=self.cfg.timeout)
        self._thread = None
        self.pipe.shutdown()


class _NoData(DataManager):
    """Stands in when the pipeline has no workers: only the game's exchange fills the buffer."""

    def round_tasks(self, round: int) -> list[Any]:
        return []


class _NoReward(RewardManager):
    def score(self, task: Any, input: Any, rollout: Any) -> list[float]:
        raise RuntimeError("no reward: the pipeline has no rollout workers")
