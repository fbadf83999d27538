"""Recipes: Hydra configs of ``_target_`` components, checked whole before any work starts.

A packaged game's folder is a Hydra config dir holding its recipes; the shared groups
(``communication=memory|none|torch|hivemind``, ``coordinator=local|evm``) come from
``pkg://genrl_swarm.conf`` and the schema ``genrl_swarm_base`` from the ConfigStore. Overrides
use Hydra's grammar (``key=value``, ``+key=value``, ``~key``, ``group=option``).

OmegaConf fixes the key set, the defaults and the interpolations. It has no ``Literal`` and
knows nothing of constructors, so :func:`validate` checks every section and every component's
arguments with msgspec, against the dataclass or the constructor's signature. Every error is one
:class:`RecipeError` line that names the field (``policy.sampling.temperature: expected float,
got 'hot'``).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import HydraException, InstantiationException, MissingConfigException
from hydra.utils import instantiate as hydra_instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException

from genrl_swarm.core.game import GameConfig
from genrl_swarm.core.trust import TrustConfig

T = TypeVar("T")


class RecipeError(ValueError):
    """A recipe that cannot run; the one-line message names the field."""


def _require(obj: object, **rules: tuple[bool, str]) -> None:
    """Raise ``<field> must be <rule>, got <value>``: the form RecipeError turns into ``section.field: ...``."""
    for name, (ok, rule) in rules.items():
        if not ok:
            raise ValueError(f"{name} must be {rule}, got {getattr(obj, name)!r}")


@dataclass
class SwarmConfig:
    """The ``swarm`` section: how many peers this process hosts."""

    num_peers: int = 1  # peers in this process, if the backend hosts several (see ByteBackend.peers_in_process)
    rank: int = 0  # this process's first peer index, when the backend does not say

    def __post_init__(self) -> None:
        _require(self, num_peers=(self.num_peers >= 1, ">= 1"), rank=(self.rank >= 0, ">= 0"))


@dataclass
class RunConfig:
    """The ``run`` section: where outputs go and what is written."""

    dir: str = "runs/game"
    checkpoint_every: int = 0  # rounds; 0 = only at the end
    keep_checkpoints: int = 3  # 0 = keep all
    learner_state_in_latest_only: bool = False  # older checkpoints drop learner/ (the optimizer's moments)
    tensorboard: bool = True
    console: bool = True
    plot: bool = True  # reward_curve.png in the run directory (needs matplotlib)
    threads: int = 0  # torch threads per in-process peer; 0 = the budget of run/threads.py

    def __post_init__(self) -> None:
        _require(
            self,
            checkpoint_every=(self.checkpoint_every >= 0, ">= 0"),
            keep_checkpoints=(self.keep_checkpoints >= 0, ">= 0"),
            threads=(self.threads >= 0, ">= 0"),
        )


@dataclass
class RecipeHead:
    """A recipe's top-level scalars: its ``name`` and the swarm ``seed`` (same tasks on every peer)."""

    name: str = "game"
    seed: int = 0


@dataclass
class PeerInfo:
    """Set per peer by :func:`resolve`: ``${peer.rank}`` and ``${peer.seed}`` (= seed * 1000 + rank)."""

    rank: int = 0
    seed: int = 0


def _defaults(cls: type, **changes: Any) -> Any:
    return field(default_factory=lambda: {**dataclasses.asdict(cls()), **changes})


@dataclass
class RecipeSchema:
    """``genrl_swarm_base``: the sections a recipe may have and their defaults. Sections are
    ``Any`` here because OmegaConf cannot type ``Literal`` fields; :func:`validate` types them."""

    name: Any = "game"
    seed: Any = 0
    peer: PeerInfo = field(default_factory=PeerInfo)
    game: Any = _defaults(GameConfig)
    swarm: Any = _defaults(SwarmConfig)
    run: Any = _defaults(RunConfig, dir="runs/${name}")
    trust: Any = _defaults(TrustConfig)
    data: Any = None
    reward: Any = None
    policy: Any = None
    learner: Any = None
    communication: Any = None
    coordinator: Any = None


ConfigStore.instance().store(name="genrl_swarm_base", node=RecipeSchema)

SECTIONS: dict[str, type] = {"game": GameConfig, "swarm": SwarmConfig, "run": RunConfig, "trust": TrustConfig}
COMPONENTS = ("data", "reward", "policy", "learner", "communication", "coordinator")
OPTIONAL = frozenset({"learner"})  # learner: null = act and share only
#: Arguments the launcher passes itself, so a recipe need not (and the check does not demand them).
INJECTED: dict[str, frozenset[str]] = {"learner": frozenset({"policy"}), "communication": frozenset({"swarm", "peer_id"})}
TOP_LEVEL = frozenset({"name", "seed", "peer", *SECTIONS, *COMPONENTS})
HYDRA_KEYS = frozenset({"_target_", "_convert_", "_recursive_", "_partial_", "_args_"})
SEARCH_PATH = "hydra.searchpath=[pkg://genrl_swarm.conf]"
GAMES = "genrl_swarm.games"


# --------------------------------------------------------------------------- finding recipes
def _games_root() -> Path:
    return Path(str(resources.files(GAMES)))


def describe(path: Path) -> str:
    """A recipe's one-line description: its first line, when that is a ``#`` comment."""
    first = path.read_text(encoding="utf-8").partition("\n")[0]
    return first.lstrip("#").strip() if first.startswith("#") else ""


def packaged_recipes() -> dict[str, dict[str, str]]:
    """game -> {recipe file name: description}, for every packaged game folder."""
    out: dict[str, dict[str, str]] = {}
    for game in sorted(p for p in _games_root().iterdir() if p.is_dir() and not p.name.startswith("_")):
        recipes = {f.name: describe(f) for f in sorted(game.glob("*.yaml"))}
        if recipes:
            out[game.name] = recipes
    return out


def recipe_path(recipe: str) -> Path:
    """A YAML file, a packaged game (``bandit`` = its recipe.yaml) or one of its recipes
    (``multistage_math/msm_dapodata_grpo.yaml``, the ``.yaml`` optional)."""
    path = Path(recipe)
    if path.is_file():
        return path
    game, _, name = recipe.partition("/")
    name = name or "recipe.yaml"
    for candidate in (name, f"{name}.yaml"):
        packaged = _games_root() / game / candidate
        if game and "/" not in name and packaged.is_file():
            return packaged
    known = ", ".join(f"{g}/{r}" for g, recipes in packaged_recipes().items() for r in recipes)
    raise RecipeError(f"no recipe {recipe!r}: not a file and not a packaged recipe (recipes: {known})")


# --------------------------------------------------------------------------- loading
def load_recipe(recipe: str, overrides: Sequence[str] = ()) -> DictConfig:
    """Compose a recipe with Hydra; interpolations stay unresolved (they may use ``peer.*``)."""
    path = recipe_path(recipe).resolve()
    try:
        with initialize_config_dir(config_dir=str(path.parent), version_base="1.3"):
            return compose(config_name=path.stem, overrides=[SEARCH_PATH, *overrides])
    except (HydraException, OmegaConfBaseException, yaml.YAMLError, ValueError) as e:
        # ValueError: Hydra's own, e.g. for a group override it reads as null
        raise RecipeError(_compose_error(e, path)) from e


_FULL_KEY = re.compile(r"full_key: (\S+)")


def _compose_error(error: Exception, path: Path) -> str:
    """Hydra's multi-line composition errors as one line that names the key or the override."""
    if isinstance(error, yaml.YAMLError):
        return f"{path}: cannot read recipe: {_one_line(str(error))}"
    if isinstance(error, MissingConfigException) and error.options is not None and error.missing_cfg_file:
        group, _, option = error.missing_cfg_file.rpartition("/")
        return f"{group}={option}: no such option (options: {', '.join(error.options)})"
    cause = error.__cause__
    found = getattr(cause, "full_key", None) or (_FULL_KEY.search(str(error)) or [None, None])[1]
    if found:
        key = str(found)
        if "." not in key and key not in TOP_LEVEL:
            return f"{key}: unknown section (sections: {', '.join(sorted(TOP_LEVEL))})"
        if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
            return f"{key}: no such key (use +{key}=... to add one)"
        return f"{key}: {_one_line(getattr(cause, 'msg', None) or str(error))}"
    text = _one_line(str(error))
    if "NoneType" in text:
        text += " (Hydra reads null as no value: name an option, e.g. communication=none)"
    return text


def _one_line(text: str) -> str:
    """The first paragraph of a message, on one line (drops Hydra's search path and doc links)."""
    kept: list[str] = []
    for line in text.splitlines():
        if line.startswith(("Config search path", "See https://", "    full_key:", "    object_type")):
            break
        if line.strip():
            kept.append(line.strip())
    return " ".join(kept)


def resolve(cfg: DictConfig, rank: int = 0) -> dict[str, Any]:
    """Plain dict for peer ``rank``: ``${peer.rank}``/``${peer.seed}`` resolve per peer."""
    cfg = copy.deepcopy(cfg)
    seed = cfg.get("seed", 0)
    base = seed if isinstance(seed, int) and not isinstance(seed, bool) else 0
    with open_dict(cfg):
        cfg.peer = PeerInfo(rank=rank, seed=base * 1000 + rank)
    try:
        out = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as e:
        raise RecipeError(f"{e.full_key}: required, missing from the recipe (set {e.full_key}=...)") from e
    except OmegaConfBaseException as e:
        raise RecipeError(f"{getattr(e, 'full_key', '') or 'recipe'}: {_one_line(str(getattr(e, 'msg', e)))}") from e
    assert isinstance(out, dict)
    return {str(k): v for k, v in out.items()}


# --------------------------------------------------------------------------- checking
def validate(spec: Mapping[str, Any]) -> None:
    """Check a resolved recipe whole, building nothing but config dataclasses; raise a
    RecipeError naming the first bad field."""
    for key in spec:
        if key not in TOP_LEVEL:
            raise RecipeError(f"{key}: unknown section (sections: {', '.join(sorted(TOP_LEVEL))})")
    _check_call(RecipeHead, {k: spec[k] for k in ("name", "seed") if k in spec}, "")
    for name, cls in SECTIONS.items():
        section(cls, spec.get(name) or {}, name)
    for name in COMPONENTS:
        if spec.get(name) is None and name in OPTIONAL:
            continue
        check_component(spec.get(name), name, INJECTED.get(name, frozenset()))
    import_target(spec["communication"]["_target_"], "communication._target_")


def section(cls: type[T], values: Any, name: str) -> T:
    """Build a config dataclass (GameConfig, SwarmConfig, RunConfig) from its recipe section."""
    if not isinstance(values, Mapping):
        raise RecipeError(f"{name}: expected a mapping, got {values!r}")
    _check_call(cls, values, name)
    return _construct(cls, values, name)


def check_component(node: Any, path: str, injected: Set[str] = frozenset()) -> None:
    """Check one ``_target_`` mapping: the target imports, and its arguments fit its signature."""
    if not _is_component(node):
        raise RecipeError(f"{path}: expected a component with a _target_, got {node!r}")
    target = import_target(node["_target_"], _join(path, "_target_"))
    _check_call(target, {k: v for k, v in node.items() if k not in HYDRA_KEYS}, path, injected)


def check_components(spec: Mapping[str, Any]) -> None:
    """:func:`validate`, then build peer 0's data, reward, policy and learner, so that their
    constructors' own checks (a ValueError, a missing file or extra) surface as RecipeErrors."""
    validate(spec)
    instantiate(spec["data"], "data")
    instantiate(spec["reward"], "reward")
    policy = instantiate(spec["policy"], "policy")
    if spec.get("learner") is not None:
        instantiate(spec["learner"], "learner", policy=policy)


def import_hint(module_name: str, error: ImportError) -> str:
    """What to do about a ``_target_`` that does not import. One of ours: its extra is missing.
    A user's package that is not on the path: ``genrl-swarm`` is a console script, so the
    current directory is not on ``sys.path`` as it is for ``python -m``. Anything else: the
    module was found but imports something missing."""
    missing = error.name or ""
    if module_name.split(".")[0] == "genrl_swarm":
        return "is its extra installed? (pip install 'genrl-swarm[<extra>]', see Install)"
    if missing and (module_name == missing or module_name.startswith(missing + ".")):
        return f"is {missing.split('.')[0]!r} importable? `pip install -e .` your project, or run with PYTHONPATH=. from the folder that holds it"
    return f"{module_name} imports {missing or 'a module'} that is not installed"


def import_target(target: Any, path: str) -> Any:
    """The object a ``_target_`` names; ``path`` is the recipe field that holds it."""
    if not isinstance(target, str) or "." not in target:
        raise RecipeError(f"{path}: expected 'package.module.Name', got {target!r}")
    module_name, _, attr = target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise RecipeError(f"{path}: cannot import {module_name!r} ({e}); {import_hint(module_name, e)}") from e
    try:
        return getattr(module, attr)
    except AttributeError as e:
        raise RecipeError(f"{path}: {module_name} has no {attr!r}") from e


def _is_component(value: Any) -> bool:
    return isinstance(value, Mapping) and "_target_" in value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check_call(call: Callable[..., Any], kwargs: Mapping[str, Any], path: str, injected: Set[str] = frozenset()) -> None:
    """Check ``call(**kwargs)`` without calling it: unknown keys, missing required arguments, and
    every value against its annotation, through a msgspec Struct built from the signature."""
    try:
        params = inspect.signature(call).parameters
    except (TypeError, ValueError):
        return  # no signature to check against (a C extension): the call itself will complain
    hints = _hints(call)
    fields: list[tuple[Any, ...]] = []
    checked: dict[str, Any] = {}
    for name, p in params.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        checked[name] = hint = _check_apart(kwargs.get(name), hints.get(name, Any), _join(path, name))
        required = p.default is p.empty and name not in injected
        fields.append((name, hint) if required else (name, hint, None))
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}  # the rest go to **kwargs unchecked
    struct = msgspec.defstruct("Arguments", fields, kw_only=True, forbid_unknown_fields=True)
    try:
        msgspec.convert(dict(kwargs), struct)
    except msgspec.ValidationError as e:
        raise RecipeError(_explain(str(e), path, kwargs, checked)) from None


def _hints(call: Callable[..., Any]) -> dict[str, Any]:
    """Resolved parameter annotations; none when one cannot be resolved (then only keys are checked)."""
    fn = call if dataclasses.is_dataclass(call) or not inspect.isclass(call) else call.__init__
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError, AttributeError):
        return {}


def _check_apart(value: Any, hint: Any, path: str) -> Any:
    """Check what msgspec cannot and return the annotation left for it: a nested component is
    checked against its own target, a mapping for a config dataclass field by field (then built,
    to run its ``__post_init__``); an annotation msgspec cannot build from YAML data is ``Any``."""
    if _is_component(value):
        check_component(value, path)
        return Any
    if isinstance(value, list) and any(_is_component(v) for v in value):
        for i, item in enumerate(value):
            if _is_component(item):
                check_component(item, f"{path}[{i}]")
        return Any
    config = _config_class(hint)
    if isinstance(value, Mapping) and config is not None:
        _check_call(config, value, path)
        _construct(config, value, path)
        return Any
    try:
        return Any if _opaque(msgspec.inspect.type_info(hint)) else hint
    except TypeError:  # e.g. a union of two mapping types
        return Any


def _config_class(hint: Any) -> type | None:
    """The one dataclass an annotation names (``SamplingConfig | Mapping[str, Any] | None``)."""
    found = [a for a in _arms(hint) if isinstance(a, type) and dataclasses.is_dataclass(a)]
    return found[0] if len(found) == 1 else None


def _opaque(info: Any) -> bool:
    """Does the annotation involve a class msgspec cannot build from plain data (a Path, a DataManager)?"""
    if isinstance(info, msgspec.inspect.CustomType):
        return True
    parts = [getattr(info, a, None) for a in ("types", "item_type", "item_types", "key_type", "value_type")]
    return any(_opaque(t) for part in parts if part is not None for t in (part if isinstance(part, tuple) else (part,)))


_AT = re.compile(r"(?P<msg>.*?)(?: - at `\$(?P<loc>[^`]*)`)?", re.S)
_STEP = re.compile(r"\.([^.\[\]]+)|\[([^\]]*)\]")
_ABSENT = object()


def _explain(message: str, path: str, values: Mapping[str, Any], hints: Mapping[str, Any]) -> str:
    """msgspec's ``Expected `float`, got `str` - at `$.x``` as ``path.x: expected float, got 'hot'``."""
    m = _AT.fullmatch(message)
    assert m is not None
    msg, steps = m["msg"], [a or (int(b) if b.isdigit() else None) for a, b in _STEP.findall(m["loc"] or "")]
    where = path
    for step in steps:
        where = f"{where}[{step}]" if isinstance(step, int) else f"{where}[...]" if step is None else _join(where, step)
    if named := re.fullmatch(r"Object contains unknown field `(.+)`", msg):
        accepted = "" if steps else f" (accepted: {', '.join(hints) or 'none'})"
        return f"{_join(where, named[1])}: unknown key{accepted}"
    if named := re.fullmatch(r"Object missing required field `(.+)`", msg):
        return f"{_join(where, named[1])}: required, missing from the recipe"
    value = _walk(values, steps)
    got = "" if value is _ABSENT else f", got {value!r}"
    hint = hints.get(steps[0]) if len(steps) == 1 and isinstance(steps[0], str) else None
    choices = [a for arm in _arms(hint) if typing.get_origin(arm) is typing.Literal for a in typing.get_args(arm)]
    if msg.startswith("Invalid enum value") and choices:
        return f"{where}: expected one of {choices}{got}"
    msg = re.sub(r", got `[^`]*`$", "", msg).replace("`", "")
    return f"{where}: {msg[:1].lower()}{msg[1:]}{got if msg.startswith('Expected') else ''}"


def _arms(hint: Any) -> tuple[Any, ...]:
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def _walk(values: Any, steps: Sequence[Any]) -> Any:
    for step in steps:
        try:
            values = values[step]
        except (KeyError, IndexError, TypeError):
            return _ABSENT
    return values


# --------------------------------------------------------------------------- building
#: A constructor's errors that are about the recipe (a bad value, a missing file or extra); others are bugs.
_BUILD_ERRORS = (ValueError, OSError, ImportError)
_FIELD_RULE = re.compile(r"(?P<field>[A-Za-z_][\w.]*) (?P<rest>must .*)", re.S)


def _blame(path: str, error: BaseException, names: Sequence[str]) -> str:
    """A constructor's own error, one line, prefixed with the field it names (``x must be ...``)
    or else with the component's path."""
    text = _one_line(str(error)) or type(error).__name__
    rule = _FIELD_RULE.fullmatch(text)
    if rule:
        head = rule["field"].split(".")[0]
        if head in names:
            return f"{_join(path, rule['field'])}: {rule['rest']}"
        if path.rpartition(".")[2] == head:  # the message already starts with this field's name
            return f"{_join(path.rpartition('.')[0], rule['field'])}: {rule['rest']}"
    return f"{path}: {text}"


def _construct(cls: Callable[..., T], values: Mapping[str, Any], path: str) -> T:
    try:
        return cls(**values)
    except (ValueError, TypeError) as e:
        raise RecipeError(_blame(path, e, list(inspect.signature(cls).parameters))) from e


def instantiate(node: Any, path: str, **injected: Any) -> Any:
    """Build one component; nested components first, each under its own path, so an error names
    the one that failed. ``injected`` are objects the launcher passes itself (the learner's
    ``policy``). Hydra binds the plain arguments (``_partial_``); objects are passed by us, as
    Hydra would turn a dataclass instance into a dict."""
    if not _is_component(node):
        raise RecipeError(f"{path}: expected a component with a _target_, got {node!r}")
    target = import_target(node["_target_"], _join(path, "_target_"))
    children = {k: instantiate(v, _join(path, k)) for k, v in node.items() if _is_component(v)}
    plain = {k: v for k, v in node.items() if k not in children}
    try:
        bound = hydra_instantiate(plain, _convert_="all", _partial_=True)
    except InstantiationException as e:
        raise RecipeError(f"{path}: {_one_line(str(e))}") from e
    try:
        return bound(**children, **injected)
    except _BUILD_ERRORS as e:
        names = list(inspect.signature(target).parameters) if callable(target) else []
        raise RecipeError(_blame(path, e, names)) from e
