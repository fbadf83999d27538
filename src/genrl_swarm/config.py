"""Recipes: Hydra-style YAML with ``_target_`` components and ``key=value`` overrides.

A recipe is checked whole before any work starts: every ``_target_`` must import, every key
must be a parameter of its target, every value must fit the parameter's annotation. Errors
name the field (``trainer.lr: expected float, got 'fast'``).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import types
import typing
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from genrl_swarm.core.game import GameConfig


class RecipeError(ValueError):
    """A recipe that cannot run; the message names the field."""


@dataclass
class SwarmConfig:
    num_peers: int = 1  # peers hosted by this process (the in-memory backend hosts several)
    rank: int = 0  # this process's first peer index, when the backend does not say


@dataclass
class RunConfig:
    dir: str = "runs/game"
    checkpoint_every: int = 0  # rounds; 0 = only at the end
    keep_checkpoints: int = 3
    tensorboard: bool = True
    console: bool = True
    plot: bool = True  # reward_curve.png in the run directory (needs matplotlib)


SECTIONS: dict[str, type] = {"game": GameConfig, "swarm": SwarmConfig, "run": RunConfig}
COMPONENTS = ("data", "reward", "trainer", "communication", "coordinator")
DEFAULTS: dict[str, Any] = {
    "name": "game",
    "seed": 0,
    "peer": {"rank": 0, "seed": 0},
    "communication": {"_target_": "genrl_swarm.comm.NullBackend"},
    "coordinator": {"_target_": "genrl_swarm.coord.LocalCoordinator"},
}
#: Parameters the launcher passes itself, so a recipe need not (and the check does not demand them).
INJECTED = {"communication": {"swarm", "peer_id"}}


# --------------------------------------------------------------------------- loading
def packaged_games() -> list[str]:
    root = resources.files("genrl_swarm.games")
    return sorted(p.name for p in root.iterdir() if p.is_dir() and (p / "recipe.yaml").is_file())


def recipe_path(recipe: str) -> Path:
    """A file path, a packaged game's name (``bandit``), or a packaged game's recipe file
    (``multistage_math/recipe.yaml``)."""
    path = Path(recipe)
    if path.is_file():
        return path
    games = resources.files("genrl_swarm.games")
    for packaged in (games / recipe / "recipe.yaml", games / recipe):
        if packaged.is_file():
            return Path(str(packaged))
    raise RecipeError(f"no recipe file {recipe!r} and no packaged game of that name (games: {', '.join(packaged_games())})")


def load_recipe(recipe: str, overrides: Sequence[str] = ()) -> DictConfig:
    """YAML + defaults + overrides, interpolations still unresolved (they may use ``peer.*``)."""
    path = recipe_path(recipe)
    try:
        loaded = OmegaConf.load(path)
    except (OmegaConfBaseException, yaml.YAMLError, OSError) as e:
        raise RecipeError(f"{path}: cannot read recipe: {e}") from e
    if not isinstance(loaded, DictConfig):
        raise RecipeError(f"{path}: a recipe is a mapping of sections, not a list")
    defaults = {**DEFAULTS, **{name: dataclasses.asdict(cls()) for name, cls in SECTIONS.items()}}
    cfg = OmegaConf.merge(OmegaConf.create(defaults), loaded)
    assert isinstance(cfg, DictConfig)
    for item in overrides:
        apply_override(cfg, item)
    return cfg


def apply_override(cfg: DictConfig, item: str) -> None:
    """``key=value`` changes an existing key; ``+key=value`` adds one (as in Hydra)."""
    key, sep, text = item.partition("=")
    if not sep or not key.lstrip("+"):
        raise RecipeError(f"override {item!r} is not key=value")
    adding, key = key.startswith("+"), key.lstrip("+")
    if not adding and OmegaConf.select(cfg, key, default=_MISSING) is _MISSING:
        raise RecipeError(f"override {key}: no such key in the recipe (use +{key}=... to add one)")
    try:
        # 0x... is an address or a key far more often than a hex number: keep it text.
        value = text if not text or text[:2].lower() in ("0x", "0o", "0b") else yaml.safe_load(text)
        if isinstance(value, str) and _FLOAT.fullmatch(value):
            value = float(value)  # YAML 1.1 reads 1e-5 (no dot) as a string
        OmegaConf.update(cfg, key, value, merge=False, force_add=True)
    except (yaml.YAMLError, OmegaConfBaseException) as e:
        raise RecipeError(f"override {item!r}: {e}") from e


_MISSING = object()
_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def resolve(cfg: DictConfig, rank: int = 0) -> dict[str, Any]:
    """Plain dict for peer ``rank``: ``${peer.rank}``/``${peer.seed}`` resolve per peer."""
    cfg = cfg.copy()
    seed = cfg.get("seed", 0)
    cfg.peer = {"rank": rank, "seed": (seed if isinstance(seed, int) else 0) * 1000 + rank}
    try:
        out = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        raise RecipeError(f"recipe interpolation failed: {e}") from e
    assert isinstance(out, dict)
    return {str(k): v for k, v in out.items()}


# --------------------------------------------------------------------------- checking
def validate(spec: Mapping[str, Any]) -> None:
    """Check a resolved recipe whole; raise RecipeError naming the first bad field."""
    allowed = set(SECTIONS) | set(COMPONENTS) | {"name", "seed", "peer"}
    for key in spec:
        if key not in allowed:
            raise RecipeError(f"{key}: unknown section (sections: {', '.join(sorted(allowed))})")
    for name, cls in SECTIONS.items():
        section_obj(cls, spec.get(name) or {}, name)
    for name in COMPONENTS:
        if name not in spec:
            raise RecipeError(f"{name}: missing component (give it a _target_)")
        check_component(spec[name], name, skip_required=INJECTED.get(name, set()))


def section_obj(cls: type, values: Any, path: str) -> Any:
    """Build a config dataclass from a recipe section, with errors that name the field."""
    if not isinstance(values, Mapping):
        raise RecipeError(f"{path}: expected a mapping, got {values!r}")
    check_kwargs(cls, dict(values), path, skip_required=set())
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:
        raise RecipeError(f"{path}: {e}") from e


def import_target(target: Any, path: str) -> Any:
    if not isinstance(target, str) or "." not in target:
        raise RecipeError(f"{path}._target_: expected 'package.module.Name', got {target!r}")
    module_name, _, attr = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except ImportError as e:
        raise RecipeError(f"{path}._target_: cannot import {module_name!r} ({e}); is its extra installed?") from e
    except AttributeError as e:
        raise RecipeError(f"{path}._target_: {module_name} has no {attr!r}") from e


def check_component(node: Any, path: str, skip_required: Set[str] = frozenset()) -> None:
    if not isinstance(node, Mapping) or "_target_" not in node:
        raise RecipeError(f"{path}: expected a component with a _target_, got {node!r}")
    target = import_target(node["_target_"], path)
    check_kwargs(target, {k: v for k, v in node.items() if k != "_target_"}, path, skip_required)


def check_kwargs(target: Any, kwargs: dict[str, Any], path: str, skip_required: Set[str]) -> None:
    try:
        sig = inspect.signature(target)
        hints = typing.get_type_hints(target.__init__ if inspect.isclass(target) else target)
    except (TypeError, ValueError, NameError):
        return  # not introspectable (C extension): let the call itself complain
    params = {n: p for n, p in sig.parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    open_kwargs = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    for key, value in kwargs.items():
        if key not in params:
            if open_kwargs:
                continue
            raise RecipeError(f"{path}.{key}: unknown key (accepted: {', '.join(params) or 'none'})")
        check_value(value, hints.get(key, Any), f"{path}.{key}")
    for name, p in params.items():
        if p.default is p.empty and name not in kwargs and name not in skip_required:
            raise RecipeError(f"{path}.{name}: required, missing from the recipe")


def check_value(value: Any, hint: Any, path: str) -> None:
    """Does ``value`` (plain YAML data) fit annotation ``hint``? Unknown annotations pass."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is inspect.Parameter.empty:
        return
    if isinstance(value, Mapping) and "_target_" in value:
        check_component(value, path)
        return
    if origin is typing.Literal:
        if value not in args:
            raise RecipeError(f"{path}: expected one of {list(args)}, got {value!r}")
        return
    if origin in (typing.Union, types.UnionType):
        dataclass_arms = [a for a in args if dataclasses.is_dataclass(a)]
        if isinstance(value, Mapping) and len(dataclass_arms) == 1:
            return check_value(value, dataclass_arms[0], path)  # its errors name the nested field
        for arm in args:
            try:
                return check_value(value, arm, path)
            except RecipeError:
                continue
        hint_text = " (quote 0x... values in YAML)" if isinstance(value, int) and str in args else ""
        raise RecipeError(f"{path}: {value!r} fits none of {hint}{hint_text}")
    if hint is type(None):
        if value is not None:
            raise RecipeError(f"{path}: expected null, got {value!r}")
        return
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecipeError(f"{path}: expected float, got {value!r}")
        return
    if hint in (int, str, bool):
        if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
            raise RecipeError(f"{path}: expected {hint.__name__}, got {value!r}")
        return
    if origin in (list, tuple, Sequence) or hint in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise RecipeError(f"{path}: expected a list, got {value!r}")
        item = args[0] if args else Any
        for i, v in enumerate(value):
            check_value(v, item, f"{path}[{i}]")
        return
    if origin in (dict, Mapping) or hint is dict:
        if not isinstance(value, Mapping):
            raise RecipeError(f"{path}: expected a mapping, got {value!r}")
        item = args[1] if len(args) == 2 else Any
        for k, v in value.items():
            check_value(v, item, f"{path}.{k}")
        return
    if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        check_kwargs(hint, dict(value), path, set())


# --------------------------------------------------------------------------- building
def instantiate(node: Any) -> Any:
    """Build a component tree: nested ``_target_`` mappings become objects, bottom-up."""
    if isinstance(node, Mapping):
        built = {k: instantiate(v) for k, v in node.items() if k != "_target_"}
        return import_target(node["_target_"], "?")(**built) if "_target_" in node else built
    if isinstance(node, list):
        return [instantiate(v) for v in node]
    return node
