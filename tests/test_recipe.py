"""Recipes: Hydra overrides and groups, per-peer seeds, and bad recipes stopped before any work
with one line that names the field."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from genrl_swarm.config import (
    RecipeError,
    RunConfig,
    SwarmConfig,
    check_components,
    import_target,
    instantiate,
    load_recipe,
    packaged_recipes,
    recipe_path,
    resolve,
    validate,
)
from genrl_swarm.core.game import GameConfig
from genrl_swarm.games.bandit import BanditData, SoftmaxLearner, SoftmaxPolicy

BANDIT_YAML = Path(__file__).parents[1] / "src/genrl_swarm/games/bandit/recipe.yaml"


def error_of(make, *overrides: str) -> str:
    """The one-line message a bad bandit recipe stops with (at composition or validation)."""
    with pytest.raises(RecipeError) as caught:
        validate(resolve(make(*overrides)))
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_overrides_reach_components_and_interpolations_follow(bandit_recipe) -> None:
    spec = resolve(bandit_recipe("learner.lr=0.25", "data.num_contexts=4", "data.tasks_per_round=2"))
    validate(spec)
    policy = instantiate(spec["policy"], "policy")
    learner = instantiate(spec["learner"], "learner", policy=policy)
    assert isinstance(learner, SoftmaxLearner) and learner.lr == 0.25 and learner.policy is policy
    assert isinstance(policy, SoftmaxPolicy) and policy.logits.shape == (2, 4, 8)  # ${data.num_contexts}


def test_exponent_floats_and_hex_strings(bandit_recipe) -> None:
    lr = resolve(bandit_recipe("learner.lr=1e-5"))["learner"]["lr"]
    assert lr == 1e-5 and isinstance(lr, float)
    for address in ("0xabc", "0x1234"):
        spec = resolve(bandit_recipe("coordinator=evm", f"coordinator.contract={address}"))
        assert spec["coordinator"]["contract"] == address  # an address stays text, not a number
        validate(spec)


def test_plus_adds_tilde_deletes_and_plain_override_of_unknown_key_fails(bandit_recipe) -> None:
    assert resolve(bandit_recipe("+data.game_seed=3"))["data"]["game_seed"] == 3
    assert "lr" not in resolve(bandit_recipe("~learner.lr"))["learner"]
    assert error_of(bandit_recipe, "data.game_seed=3") == "data.game_seed: no such key (use +data.game_seed=... to add one)"


def test_communication_and_coordinator_groups(bandit_recipe) -> None:
    assert resolve(bandit_recipe())["communication"]["_target_"] == "genrl_swarm.comm.InMemoryBackend"
    alone = resolve(bandit_recipe("communication=none"))
    assert alone["communication"]["_target_"] == "genrl_swarm.comm.NullBackend"
    dht = resolve(bandit_recipe("communication=hivemind", "communication.min_peers=3"))
    validate(dht)
    assert dht["communication"]["_target_"] == "genrl_swarm.comm.hivemind.dht.HivemindBackend"
    assert dht["communication"]["min_peers"] == 3 and dht["communication"]["initial_peers"] == []
    chain = resolve(bandit_recipe("coordinator=evm"))
    validate(chain)
    assert chain["coordinator"]["_target_"] == "genrl_swarm.coord.evm.EvmCoordinator"
    assert error_of(bandit_recipe, "communication=nope") == "communication=nope: no such option (options: hivemind, memory, none, torch)"
    assert "communication=none" in error_of(bandit_recipe, "communication=null")  # Hydra reads null as no value


@pytest.mark.parametrize("group, hosted", [("memory", 3), ("none", 1), ("torch", 1), ("hivemind", 1)])
def test_the_backend_alone_decides_how_many_peers_a_process_hosts(bandit_recipe, group: str, hosted: int) -> None:
    spec = resolve(bandit_recipe(f"communication={group}"))  # the recipe says swarm.num_peers: 3
    validate(spec)
    backend = import_target(spec["communication"]["_target_"], "communication._target_")
    assert backend.peers_in_process(spec["swarm"]["num_peers"]) == hosted


def test_data_source_group(tmp_path: Path) -> None:
    default = resolve(load_recipe("multistage_math"))["data"]["source"]
    assert default["_target_"] == "genrl_swarm.data.reasoning_gym.ReasoningGymData"
    with pytest.raises(RecipeError, match=r"^data\.source\.path: required, missing from the recipe"):
        resolve(load_recipe("multistage_math", ["data/source=file"]))
    qa = tmp_path / "qa.jsonl"
    qa.write_text("\n".join(json.dumps({"question": f"{i}+1?", "answer": str(i + 1)}) for i in range(30)))
    spec = resolve(load_recipe("multistage_math", ["data/source=file", f"data.source.path={qa}", "data.tasks_per_round=3"]))
    validate(spec)
    assert spec["data"]["source"]["tasks_per_round"] == 3  # one setting, interpolated into the source
    data = instantiate(spec["data"], "data")
    assert type(data.source).__name__ == "FileQAData" and len(data.round_tasks(0)) == 3


def test_peer_seed_differs_per_peer_and_data_seed_does_not(bandit_recipe) -> None:
    cfg = bandit_recipe("seed=7")
    a, b = resolve(cfg, rank=0), resolve(cfg, rank=3)
    assert (a["policy"]["seed"], b["policy"]["seed"]) == (7000, 7003)  # ${peer.seed} = seed * 1000 + rank
    assert a["data"] == b["data"] and a["data"]["seed"] == 7


def test_same_seed_same_tasks_different_seed_different_tasks() -> None:
    first, second, other = BanditData(seed=5), BanditData(seed=5), BanditData(seed=6)
    for r in range(5):
        assert [t.id for t in first.round_tasks(r)] == [t.id for t in second.round_tasks(r)]
    assert any([t.id for t in first.round_tasks(r)] != [t.id for t in other.round_tasks(r)] for r in range(5))


@pytest.mark.parametrize(
    "override, message",
    [
        ("learner.lr=fast", "learner.lr: expected float, got 'fast'"),
        ("+learner.lrr=1", "learner.lrr: unknown key (accepted: policy, lr, use_swarm)"),
        ("learner.use_swarm=3", "learner.use_swarm: expected bool, got 3"),
        ("data.num_arms=1.5", "data.num_arms: expected int, got 1.5"),
        ("game.train_every=epoch", "game.train_every: expected one of ['round', 'stage'], got 'epoch'"),
        ("game.max_rounds=many", "game.max_rounds: expected int, got 'many'"),
        ("game.max_rounds=-1", "game.max_rounds: must be >= 0, got -1"),
        ("game.exchange_timeout=-1", "game.exchange_timeout: must be > 0 and finite, got -1"),
        ("game.exchange_timeout=inf", "game.exchange_timeout: must be > 0 and finite, got inf"),
        ("swarm.num_peers=0", "swarm.num_peers: must be >= 1, got 0"),
        ("trust.cpu_budget=0", "trust.cpu_budget: must be > 0 seconds, got 0"),
        ("trust.max_units=-1", "trust.max_units: must be >= 0, got -1"),
        ("game.max_jump=-2", "game.max_jump: must be >= 0, got -2"),
        ("run.checkpoint_every=-2", "run.checkpoint_every: must be >= 0, got -2"),
        ("seed=abc", "seed: expected int, got 'abc'"),
        ("policy._target_=genrl_swarm.games.bandit.Nope", "policy._target_: genrl_swarm.games.bandit has no 'Nope'"),
        ("policy=null", "policy: expected a component with a _target_, got None"),
        ("data.num_contexts=${data.nope}", "data.num_contexts: Interpolation key 'data.nope' not found"),
    ],
)
def test_bad_value_names_the_field(bandit_recipe, override: str, message: str) -> None:
    assert error_of(bandit_recipe, override) == message


@pytest.mark.parametrize(
    "override, start",
    [
        ("+game.rounds=3", "game.rounds: unknown key (accepted: num_stages, max_rounds, train_every,"),
        ("reward._target_=no_such_pkg.Reward", "reward._target_: cannot import 'no_such_pkg'"),
        ("+extra=1", "extra: unknown section (sections: communication, coordinator, data, game, learner,"),
        ("data.x", "Error parsing override 'data.x'"),
    ],
)
def test_bad_key_names_the_field(bandit_recipe, override: str, start: str) -> None:
    assert error_of(bandit_recipe, override).startswith(start)


@pytest.mark.parametrize(
    "override, message",
    [
        ("policy.sampling.temperature=hot", "policy.sampling.temperature: expected float, got 'hot'"),
        ("policy.sampling.temperature=0", "policy.sampling.temperature: must be > 0, got 0"),
        ("learner.grpo.off_policy=maybe", "learner.grpo.off_policy: expected one of ['none', 'tis', 'decoupled'], got 'maybe'"),
        ("data.source.datasets=[1]", "data.source.datasets[0]: expected str, got 1"),
    ],
)
def test_nested_lm_settings_are_typed_without_loading_a_model(override: str, message: str) -> None:
    with pytest.raises(RecipeError) as caught:
        validate(resolve(load_recipe("multistage_math", [override])))
    assert str(caught.value) == message


def test_unknown_nested_key_lists_the_accepted_ones() -> None:
    with pytest.raises(RecipeError, match=r"^policy\.sampling\.temp: unknown key \(accepted: num_generations, max_new_tokens, temperature"):
        validate(resolve(load_recipe("multistage_math", ["+policy.sampling.temp=1"])))


def test_constructor_error_is_caught_by_check_components_only(bandit_recipe) -> None:
    spec = resolve(bandit_recipe("data.tasks_per_round=20"))
    validate(spec)  # types are fine; only the constructor knows the rule
    with pytest.raises(RecipeError) as caught:
        check_components(spec)
    assert str(caught.value) == "data: need 0 < tasks_per_round <= num_contexts, got 20 and 16"


def test_instantiate_passes_injected_objects_unchanged(bandit_recipe) -> None:
    marker = SwarmConfig(num_peers=2)  # a dataclass: Hydra's own kwargs merge would turn it into a dict
    learner = instantiate(resolve(bandit_recipe())["learner"], "learner", policy=marker)
    assert learner.policy is marker


def _user_recipe(tmp_path: Path, **changes: object) -> str:
    recipe = yaml.safe_load(BANDIT_YAML.read_text())
    for key, value in changes.items():
        if value is None:
            del recipe[key]
        else:
            recipe[key] = value
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


def test_user_recipe_file_finds_the_shared_groups(tmp_path: Path) -> None:
    spec = resolve(load_recipe(_user_recipe(tmp_path), ["communication=none"]))
    validate(spec)
    assert spec["communication"]["_target_"] == "genrl_swarm.comm.NullBackend"


def test_missing_component_missing_argument_and_unknown_section(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=r"^reward: expected a component with a _target_, got None$"):
        validate(resolve(load_recipe(_user_recipe(tmp_path, reward=None))))
    with pytest.raises(RecipeError, match=r"^reward\.path: required, missing from the recipe$"):
        validate(resolve(load_recipe(_user_recipe(tmp_path, reward={"_target_": "genrl_swarm.data.files.FileQAData"}))))
    with pytest.raises(RecipeError, match=r"^trainer: unknown section \(sections: "):
        load_recipe(_user_recipe(tmp_path, trainer={"_target_": "x.Y"}))


def test_unreadable_recipe_and_missing_recipe(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("game: [unclosed\n")
    with pytest.raises(RecipeError, match="cannot read recipe") as caught:
        load_recipe(str(bad))
    assert "\n" not in str(caught.value)
    with pytest.raises(RecipeError) as caught:
        recipe_path("multistage_math/nope.yaml")
    assert "no recipe 'multistage_math/nope.yaml'" in str(caught.value)
    assert "multistage_math/msm_dapodata_grpo.yaml" in str(caught.value) and "bandit/recipe.yaml" in str(caught.value)


def test_every_packaged_recipe_is_described_and_valid() -> None:
    recipes = packaged_recipes()
    assert {"bandit", "multistage_math", "reasoning_gym"} <= set(recipes)
    assert "msm_dapodata_grpo.yaml" in recipes["multistage_math"]
    for game, files in recipes.items():
        for name, description in files.items():
            assert description, f"{game}/{name} lacks its '# description' first line"
            validate(resolve(load_recipe(f"{game}/{name}")))
            assert recipe_path(f"{game}/{name.removesuffix('.yaml')}") == recipe_path(f"{game}/{name}")


def test_every_grpo_recipe_lists_the_trainer_group_and_others_add_it_with_plus() -> None:
    """``trainer`` is in the defaults of every GRPO recipe (after ``_self_``: the async learner
    replaces the recipe's), so ``trainer=async_grpo`` is a plain override there; elsewhere Hydra's
    own one-line error says to add it."""
    recipes = [f"{game}/{name}" for game, names in packaged_recipes().items() for name in names]
    grpo = [r for r in recipes if (resolve(load_recipe(r)).get("learner") or {}).get("_target_", "").endswith(".GRPOLearner")]
    assert len(grpo) >= 5  # reasoning_gym (recipe, digits, sapo), multistage_math (two)
    for recipe in grpo:
        assert resolve(load_recipe(recipe, ["trainer=async_grpo"]))["learner"]["_target_"].endswith(".AsyncGRPOLearner"), recipe
    with pytest.raises(
        RecipeError, match=r"^Could not override 'trainer'\. No match in the defaults list\. To append to your default list use \+trainer=async_grpo$"
    ):
        load_recipe("bandit", ["trainer=async_grpo"])


def test_an_unimportable_target_says_what_to_do(bandit_recipe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ours: its extra. A user's package not on the path: install it or PYTHONPATH=. (a console
    script does not put the current directory on the path). A user's module that imports
    something missing: that dependency, not the package, is named."""
    assert error_of(bandit_recipe, "reward._target_=my_game.Reward").endswith(
        "is 'my_game' importable? `pip install -e .` your project, or run with PYTHONPATH=. from the folder that holds it"
    )
    (tmp_path / "my_game").mkdir()
    (tmp_path / "my_game" / "__init__.py").write_text("import not_installed_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert error_of(bandit_recipe, "reward._target_=my_game.Reward").endswith("my_game imports not_installed_dependency that is not installed")
    monkeypatch.setitem(sys.modules, "genrl_swarm.games.nope", None)  # an optional module of ours that cannot import
    assert "is its extra installed?" in error_of(bandit_recipe, "reward._target_=genrl_swarm.games.nope.Reward")


def test_validate_returns_the_typed_sections(bandit_recipe) -> None:
    """One conversion types the recipe; the sections come back built (their checks run)."""
    recipe = validate(resolve(bandit_recipe("game.max_rounds=5", "run.keep_checkpoints=0")))
    assert (recipe.name, recipe.seed) == ("bandit", 42)
    assert isinstance(recipe.game, GameConfig) and recipe.game.max_rounds == 5
    assert isinstance(recipe.run, RunConfig) and recipe.run.keep_checkpoints == 0
    spec = resolve(bandit_recipe())
    spec["game"] = 3
    with pytest.raises(RecipeError, match=r"^game: expected a mapping, got 3$"):
        validate(spec)
