"""Recipes: Hydra configs of ``_target_`` components, checked whole before any work starts.

A packaged game's folder is a Hydra config dir holding its recipes; the shared groups
(``communication=memory|none|torch|hivemind``, ``coordinator=local|evm``) come from
``pkg://genrl_swarm.conf`` and the schema ``genrl_swarm_base`` from the ConfigStore. Overrides
use Hydra's grammar (``key=value``, ``+key=value``, ``~key``, ``group=option``).

OmegaConf fixes the key set, the defaults and the interpolations. It has no ``Literal`` and
knows nothing of constructors, so :func:`validate` types the recipe: every section by its config
dataclass (:data:`SECTIONS`), every component's arguments by its constructor's signature (a
nested config dataclass by its fields), all in one ``msgspec.convert``. Every error is one
:class:`RecipeError` line that names the field (``policy.sampling.temperature: expected float,
got 'hot'``), made from the error's location, the value there and the type there.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TypeVar

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


#: ``run.loggers``' names; ``run/loggers`` opens each (its module, and the library it wraps, imported only when named).
LoggerName = Literal["jsonl", "tensorboard", "trackio", "wandb"]


@dataclass
class RunConfig:
    """The ``run`` section: where outputs go and what is written."""

    dir: str = "runs/game"
    checkpoint_every: int = 0  # rounds; 0 = only at the end
    keep_checkpoints: int = 3  # 0 = keep all
    learner_state_in_latest_only: bool = False  # older checkpoints drop learner/ (the optimizer's moments)
    loggers: list[LoggerName] = field(default_factory=lambda: ["jsonl", "tensorboard"])  # + trackio, wandb; jsonl is always on
    tensorboard: bool = True  # false: leave tensorboard out of loggers (the short form)
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
class PeerInfo:
    """Set per peer by :func:`resolve`: ``${peer.rank}`` and ``${peer.seed}`` (= seed * 1000 + rank)."""

    rank: int = 0
    seed: int = 0


def _defaults(cls: type, **changes: Any) -> Any:
    return field(default_factory=lambda: {**dataclasses.asdict(cls()), **changes})


@dataclass
class RecipeSchema:
    """``genrl_swarm_base``: the sections a recipe may have and their defaults. Sections are
    ``Any`` here because OmegaConf cannot type ``Literal`` fields; :func:`validate` types them
    (:class:`Recipe`)."""

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


def _compose_error(error: Exception, path: Path) -> str:
    """Hydra's multi-line composition errors as one line that names the key or the override."""
    if isinstance(error, yaml.YAMLError):
        return f"{path}: cannot read recipe: {_one_line(str(error))}"
    if isinstance(error, MissingConfigException) and error.options is not None and error.missing_cfg_file:
        group, _, option = error.missing_cfg_file.rpartition("/")
        return f"{group}={option}: no such option (options: {', '.join(error.options)})"
    cause = error.__cause__ or error.__context__  # OmegaConf's error, which Hydra wraps or re-raises
    found = getattr(cause, "full_key", None)
    if found:
        key = str(found)
        if "." not in key and key not in TOP_LEVEL:
            return f"{key}: unknown section (sections: {', '.join(sorted(TOP_LEVEL))})"
        if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
            return f"{key}: no such key (use +{key}=... to add one)"
        return f"{key}: {_one_line(getattr(cause, 'msg', None) or str(error))}"
    text = _one_line(str(error))
    if not isinstance(error, (HydraException, OmegaConfBaseException)):  # Hydra's ValueError for a group set to null
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
@dataclass
class Recipe:
    """A checked recipe, typed: what :func:`validate` returns. The components stay plain
    mappings for :func:`instantiate`; their types are their constructors' signatures."""

    name: str = "game"
    seed: int = 0
    game: GameConfig = field(default_factory=GameConfig)
    swarm: SwarmConfig = field(default_factory=SwarmConfig)
    run: RunConfig = field(default_factory=RunConfig)
    trust: TrustConfig = field(default_factory=TrustConfig)


#: The config dataclasses met while typing a value, each with its mapping and path, inner first.
_Later = list[tuple[type, Mapping[str, Any], str]]


def validate(spec: Mapping[str, Any]) -> Recipe:
    """Check a resolved recipe whole, building nothing but config dataclasses; return its typed
    head and sections, or raise a RecipeError naming the first bad field.

    The keys are checked against the dataclasses' fields and the components' signatures (which
    imports every ``_target_``), the values in one ``msgspec.convert`` of the whole recipe to the
    type those make; then the dataclasses are built, which runs their ``__post_init__``."""
    for key in spec:
        if key not in TOP_LEVEL:
            raise RecipeError(f"{key}: unknown section (sections: {', '.join(sorted(TOP_LEVEL))})")
    values: dict[str, Any] = {}
    fields: list[tuple[str, Any, Any]] = []
    later: _Later = []
    for name, hint in typing.get_type_hints(Recipe).items():
        values[name] = spec.get(name) or {} if name in SECTIONS else spec.get(name, getattr(Recipe, name))
        fields.append((name, _field_type(values[name], hint, name, later), None))
    for name in COMPONENTS:
        if spec.get(name) is not None or name not in OPTIONAL:
            values[name] = spec.get(name)
            fields.append((name, _arguments(values[name], name, INJECTED.get(name, frozenset()), later), None))
    built = _check(values, msgspec.defstruct("Recipe", fields, kw_only=True), "", later)
    return Recipe(**{f.name: built.get(f.name, values[f.name]) for f in dataclasses.fields(Recipe)})


def _check(value: Any, type_: Any, path: str, later: _Later) -> dict[str, Any]:
    """Convert ``value`` to ``type_`` (made by :func:`_field_type`, which filled ``later``), then
    build the config dataclasses from the recipe's values: ``{path: dataclass}``."""
    try:
        msgspec.convert(value, type_)
    except msgspec.ValidationError as e:
        raise RecipeError(_explain(e, type_, value, path)) from None
    return {where: _construct(cls, mapping, where) for cls, mapping, where in later}


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


def _arguments(node: Any, path: str, injected: Set[str], later: _Later) -> Any:
    """The type of one component's arguments: a Struct of the ones the recipe gives, each typed
    by the constructor's annotation. A target without a signature (a C extension) is ``Any``."""
    if not _is_component(node):
        raise RecipeError(f"{path}: expected a component with a _target_, got {node!r}")
    target = import_target(node["_target_"], _join(path, "_target_"))
    given = {k: v for k, v in node.items() if k not in HYDRA_KEYS}
    hints = _keys(target, given, path, injected)
    if hints is None:
        return Any
    fields = [(k, _field_type(v, hints.get(k, Any), _join(path, k), later), None) for k, v in given.items() if k in hints]
    return msgspec.defstruct("Arguments", fields, kw_only=True)


def _keys(call: Callable[..., Any], given: Mapping[str, Any], path: str, injected: Set[str] = frozenset()) -> dict[str, Any] | None:
    """Check ``given``'s keys against ``call``'s parameters (unknown, then required and missing)
    and return the parameters' annotations (``Any`` where none resolves); None without a signature.
    Keys that go to ``**kwargs`` are not checked."""
    try:
        params = inspect.signature(call).parameters
    except (TypeError, ValueError):
        return None
    names = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        for key in given:
            if key not in names:
                raise RecipeError(f"{_join(path, key)}: unknown key (accepted: {', '.join(names) or 'none'})")
    for name in names:
        if params[name].default is params[name].empty and name not in injected and name not in given:
            raise RecipeError(f"{_join(path, name)}: required, missing from the recipe")
    hints = _hints(call)
    return {n: hints.get(n, Any) for n in names}


def _hints(call: Callable[..., Any]) -> dict[str, Any]:
    """Resolved parameter annotations; none when one cannot be resolved (then only keys are checked)."""
    fn = call if dataclasses.is_dataclass(call) or not inspect.isclass(call) else call.__init__
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError, AttributeError):
        return {}


def _field_type(value: Any, hint: Any, path: str, later: _Later) -> Any:
    """The type ``value`` is converted to: a nested component's arguments (a list's, item by
    item); for a mapping given to a config dataclass, a Struct of its fields (the dataclass is
    built after the conversion, from the recipe's values, to run its ``__post_init__``); else
    the annotation, or ``Any`` where msgspec cannot build it from YAML data (a Path, a DataManager)."""
    if _is_component(value):
        return _arguments(value, path, frozenset(), later)
    if isinstance(value, list) and any(_is_component(v) for v in value):
        items = tuple(_arguments(v, f"{path}[{i}]", frozenset(), later) if _is_component(v) else Any for i, v in enumerate(value))
        return tuple[items]  # type: ignore[valid-type]
    config = _config_class(hint)
    if config is not None and isinstance(value, Mapping):
        hints = _keys(config, value, path) or {}
        fields = [(k, _field_type(v, hints.get(k, Any), _join(path, k), later), None) for k, v in value.items()]
        later.append((config, value, path))
        return msgspec.defstruct(config.__name__, fields, kw_only=True)
    try:
        return Any if _opaque(msgspec.inspect.type_info(hint)) else hint
    except TypeError:  # e.g. a union of two mapping types
        return Any


def _config_class(hint: Any) -> type | None:
    """The one dataclass an annotation names (``SamplingConfig | Mapping[str, Any] | None``)."""
    found = [a for a in _arms(hint) if isinstance(a, type) and dataclasses.is_dataclass(a)]
    return found[0] if len(found) == 1 else None


def _arms(hint: Any) -> tuple[Any, ...]:
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def _opaque(info: Any) -> bool:
    """Does the annotation involve a class msgspec cannot build from plain data (a Path, a DataManager)?"""
    if isinstance(info, msgspec.inspect.CustomType):
        return True
    parts = [getattr(info, a, None) for a in ("types", "item_type", "item_types", "key_type", "value_type")]
    return any(_opaque(t) for part in parts if part is not None for t in (part if isinstance(part, tuple) else (part,)))


#: A step of msgspec's error location (``$.policy.sampling.temperature``, ``$.datasets[0]``).
_STEP = re.compile(r"\.([^.\[\]]+)|\[([^\]]*)\]")
_ABSENT = object()


def _explain(error: msgspec.ValidationError, type_: Any, value: Any, path: str) -> str:
    """One line from a failed conversion, made from what is structured: the location, the value
    there, and the type there (``policy.sampling.temperature: expected float, got 'hot'``).
    msgspec gives the location only in its message, after `` - at `$``; that part alone is
    parsed, the prose before it is not used (but for a location no annotation explains)."""
    text, at, loc = str(error).rpartition(" - at `$")
    steps = [a or (int(b) if b.isdigit() else None) for a, b in _STEP.findall(loc.removesuffix("`"))] if at else []
    where = path
    for step in steps:
        where = f"{where}[{step}]" if isinstance(step, int) else f"{where}[...]" if step is None else _join(where, step)
    hint = type_
    for step in steps:
        hint = _child(hint, step)
    if hint is None:
        return f"{where}: {text or loc}"
    got = _walk(value, steps)
    return f"{where}: expected {_describe(hint)}" + ("" if got is _ABSENT else f", got {got!r}")


def _child(hint: Any, step: str | int | None) -> Any:
    """The annotation at ``step`` (a field name, a list index, a mapping key) inside ``hint``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return next((c for c in (_child(a, step) for a in args if a is not type(None)) if c is not None), None)
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        return next((f.type for f in msgspec.structs.fields(hint) if f.name == step), None)
    if isinstance(step, int) and origin is tuple and args and args[-1] is not Ellipsis:
        return args[step] if step < len(args) else None
    if not isinstance(step, int) and isinstance(origin, type) and issubclass(origin, Mapping):
        return args[1] if len(args) == 2 else Any
    if isinstance(step, int) and isinstance(origin, type) and issubclass(origin, Iterable):
        return args[0] if args else Any
    return None


def _describe(hint: Any) -> str:
    """An annotation as the error's ``expected ...``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return f"one of {list(args)}"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_describe(a) for a in args)
    if hint is None or hint is type(None):
        return "null"
    if dataclasses.is_dataclass(hint) or isinstance(origin or hint, type) and issubclass(origin or hint, (msgspec.Struct, Mapping)):
        return "a mapping"
    if isinstance(origin, type) and issubclass(origin, Iterable) and origin is not str:
        return "a list"
    return getattr(hint, "__name__", str(hint))


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
    """A constructor's own error, one line, prefixed with the field it names or else with the
    component's path. ``x must be ...`` is this project's convention for a constructor's errors
    (:func:`_require`), not a library's text."""
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
