"""Recipes: overrides, per-peer seeds, and bad recipes stopped before any work, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from genrl_swarm.cli import main
from genrl_swarm.config import RecipeError, instantiate, load_recipe, resolve, validate
from genrl_swarm.games.bandit import BanditData, SoftmaxPolicyTrainer


def test_overrides_reach_components(bandit_recipe) -> None:
    spec = resolve(bandit_recipe("trainer.lr=0.25", "data.num_contexts=4", "data.tasks_per_round=2"))
    validate(spec)
    trainer = instantiate(spec["trainer"])
    assert isinstance(trainer, SoftmaxPolicyTrainer) and trainer.lr == 0.25
    assert trainer.logits.shape == (2, 4, 8)  # interpolation ${data.num_contexts} followed the override


def test_exponent_floats_without_a_dot(bandit_recipe) -> None:
    assert resolve(bandit_recipe("trainer.lr=1e-5"))["trainer"]["lr"] == 1e-5


def test_plus_adds_a_key_and_plain_override_of_unknown_key_fails(bandit_recipe) -> None:
    assert resolve(bandit_recipe("+data.game_seed=3"))["data"]["game_seed"] == 3
    with pytest.raises(RecipeError, match=r"override data\.game_seed: no such key"):
        bandit_recipe("data.game_seed=3")


def test_peer_seed_differs_per_peer_and_data_seed_does_not(bandit_recipe) -> None:
    cfg = bandit_recipe()
    a, b = resolve(cfg, rank=0), resolve(cfg, rank=1)
    assert a["trainer"]["seed"] != b["trainer"]["seed"]
    assert a["data"] == b["data"]


def test_same_seed_same_tasks_different_seed_different_tasks() -> None:
    first, second, other = BanditData(seed=5), BanditData(seed=5), BanditData(seed=6)
    for r in range(5):
        assert [t.id for t in first.round_tasks(r)] == [t.id for t in second.round_tasks(r)]
    assert any([t.id for t in first.round_tasks(r)] != [t.id for t in other.round_tasks(r)] for r in range(5))
    assert [t.id for t in first.round_tasks(0)] != [t.id for t in first.round_tasks(1)]


@pytest.mark.parametrize(
    "override, message",
    [
        ("+trainer.lrr=1", r"trainer\.lrr: unknown key \(accepted: num_contexts"),
        ("trainer.lr=fast", r"trainer\.lr: expected float, got 'fast'"),
        ("trainer.use_swarm=3", r"trainer\.use_swarm: expected bool"),
        ("data.num_arms=1.5", r"data\.num_arms: expected int"),
        ("game.train_every=epoch", r"game\.train_every: expected one of \['round', 'stage'\]"),
        ("game.max_rounds=many", r"game\.max_rounds: expected int"),
        ("+game.rounds=3", r"game\.rounds: unknown key"),
        ("trainer._target_=genrl_swarm.games.bandit.Nope", r"trainer\._target_: genrl_swarm.games.bandit has no 'Nope'"),
        ("reward._target_=no_such_pkg.Reward", r"reward\._target_: cannot import 'no_such_pkg'"),
        ("trainer=null", r"trainer: expected a component with a _target_"),
        ("+extra=1", r"extra: unknown section"),
        ("game.exchange_timeout=-1", r"game: invalid game config"),
    ],
)
def test_bad_recipe_names_the_field(bandit_recipe, override: str, message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        validate(resolve(bandit_recipe(override)))


def test_missing_component_and_missing_required_arg(tmp_path: Path) -> None:
    recipe = yaml.safe_load(Path(__file__).parents[1].joinpath("src/genrl_swarm/games/bandit/recipe.yaml").read_text())
    del recipe["reward"]
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    with pytest.raises(RecipeError, match="reward: missing component"):
        validate(resolve(load_recipe(str(path))))
    recipe["reward"] = {"_target_": "genrl_swarm.config.RecipeError"}  # any callable; here one with *args
    recipe["coordinator"] = {"_target_": "genrl_swarm.run.launcher.Checkpointer"}
    path.write_text(yaml.safe_dump(recipe))
    with pytest.raises(RecipeError, match="coordinator.directory: required"):
        validate(resolve(load_recipe(str(path))))


def test_unreadable_recipe_and_unknown_name(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("game: [unclosed")
    with pytest.raises(RecipeError, match="cannot read recipe"):
        load_recipe(str(bad))
    with pytest.raises(RecipeError, match="no packaged game of that name"):
        load_recipe("nonexistent_game")


def test_cli_stops_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "never"
    code = main(["run", "--recipe", "bandit", f"run.dir={run_dir}", "trainer.lr=fast"])
    assert code == 2
    assert "recipe error: trainer.lr: expected float" in capsys.readouterr().err
    assert not run_dir.exists()


def test_cli_validate_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--recipe", "bandit"]) == 0
    assert "ok" in capsys.readouterr().out
