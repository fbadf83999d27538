"""The MARL configuration records: which environment and scenario, which system (IPPO/MAPPO).

They are plain dataclasses so the recipe checker (``genrl_swarm.config.validate``) types them
field by field and a bad value becomes one line naming the field. Hydra hands the components
mappings; ``of`` turns either form into the record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

#: jumanji id -> the scenario family its generator accepts.
ENV_FAMILY = {"LevelBasedForaging-v0": "lbf", "RobotWarehouse-v0": "rware"}


@dataclass(frozen=True)
class Scenario:
    """One task of an environment: the keyword arguments of jumanji's scenario generator
    (LBF: grid_size, fov, num_agents, num_food, max_agent_level, force_coop; RWARE: shelf_rows,
    shelf_columns, column_height, num_agents, sensor_range, request_queue_size)."""

    name: str = "2s-8x8-2p-2f-coop"
    family: Literal["lbf", "rware"] = "lbf"
    task_config: dict[str, int | bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.task_config:
            raise ValueError(f"task_config must name the generator's arguments, got {self.task_config!r}")


@dataclass(frozen=True)
class EnvConfig:
    """The ``env`` group: a jumanji environment id, its scenario and how rewards are given."""

    env_name: Literal["LevelBasedForaging-v0", "RobotWarehouse-v0"] = "LevelBasedForaging-v0"
    scenario: Scenario | Mapping[str, Any] = field(default_factory=lambda: Scenario(task_config=LBF_DEFAULT))
    time_limit: int = 100
    team_reward: bool = True  # every agent gets the team's summed reward (Mava's default) or its own
    kwargs: dict[str, float | int | bool] = field(default_factory=dict)  # more env constructor arguments

    def __post_init__(self) -> None:
        if isinstance(self.scenario, Mapping):
            object.__setattr__(self, "scenario", Scenario(**self.scenario))
        scenario = self.scenario
        assert isinstance(scenario, Scenario)
        if ENV_FAMILY[self.env_name] != scenario.family:
            raise ValueError(
                f"scenario must be a {ENV_FAMILY[self.env_name]} scenario for {self.env_name}, got {scenario.name!r} ({scenario.family})"
            )
        if self.time_limit < 1:
            raise ValueError(f"time_limit must be >= 1, got {self.time_limit}")

    @property
    def task(self) -> Scenario:
        assert isinstance(self.scenario, Scenario)
        return self.scenario

    @classmethod
    def of(cls, value: EnvConfig | Mapping[str, Any]) -> EnvConfig:
        return value if isinstance(value, EnvConfig) else cls(**value)

    def key(self) -> str:
        """A stable text identity (the record holds dicts, so it is not hashable itself)."""
        return json.dumps(asdict(self), sort_keys=True)


LBF_DEFAULT: dict[str, int | bool] = {
    "grid_size": 8, "fov": 2, "num_agents": 2, "num_food": 2, "max_agent_level": 2, "force_coop": True,
}  # fmt: skip


@dataclass(frozen=True)
class SystemConfig:
    """The ``system`` group: IPPO (each agent's critic sees its own observation) or MAPPO (a
    centralised critic sees the global state), with PPO's hyperparameters. Defaults are Mava's
    ff_ippo defaults: rollout 128, 4 epochs, 2 minibatches, 16 environments."""

    name: Literal["ippo", "mappo"] = "ippo"
    num_envs: int = 16
    rollout_length: int = 128
    epochs: int = 4
    num_minibatches: int = 2
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    actor_lr: float = 2.5e-4
    critic_lr: float = 2.5e-4
    layers: tuple[int, ...] = (128, 128)
    is_cap: float = 2.0  # truncation of the importance weight of data another policy collected
    #: CPU devices to split the environments and every minibatch over (``marl.devices``): 0 is
    #: one per core; 1 runs unsplit, the minibatch draw then the same on every machine.
    devices: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        for name, ok, rule in (
            ("num_envs", self.num_envs >= 1, ">= 1"),
            ("rollout_length", self.rollout_length >= 1, ">= 1"),
            ("epochs", self.epochs >= 1, ">= 1"),
            ("num_minibatches", self.num_minibatches >= 1 and (self.num_envs * self.rollout_length) % self.num_minibatches == 0,
             ">= 1 and divide num_envs * rollout_length"),
            ("gamma", 0.0 <= self.gamma <= 1.0, "in [0, 1]"),
            ("gae_lambda", 0.0 <= self.gae_lambda <= 1.0, "in [0, 1]"),
            ("clip_eps", self.clip_eps > 0, "> 0"),
            ("layers", len(self.layers) >= 1 and min(self.layers) >= 1, "a non-empty list of sizes >= 1"),
            ("is_cap", self.is_cap >= 1.0, ">= 1"),
            ("devices", self.devices >= 0, ">= 0 (0: one per core)"),
        ):  # fmt: skip
            if not ok:
                raise ValueError(f"{name} must be {rule}, got {getattr(self, name)!r}")

    @property
    def centralised_critic(self) -> bool:
        return self.name == "mappo"

    @classmethod
    def of(cls, value: SystemConfig | Mapping[str, Any]) -> SystemConfig:
        return value if isinstance(value, SystemConfig) else cls(**value)


def derive_seed(*parts: object) -> int:
    """A 31-bit seed from anything printable: the same on every peer and in every process."""
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:4], "little") >> 1
