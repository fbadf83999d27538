"""``genrl-swarm export`` (issue 47.6): a peer's checkpoint becomes a folder ``transformers`` loads
(safetensors, config, tokenizer; a PEFT adapter folder when the peer trained LoRA) with a model
card in the Hub's format. A tiny-model swarm trains 2 rounds, its peer is exported, and the
export is loaded with ``AutoModelForCausalLM.from_pretrained`` and generates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
import torch

transformers = pytest.importorskip("transformers")  # the tiny model, and loading the export
huggingface_hub = pytest.importorskip("huggingface_hub")  # reads the card as the Hub does

from genrl_swarm.cli import main
from genrl_swarm.config import load_recipe
from genrl_swarm.run.launcher import run_recipe

pytestmark = pytest.mark.slow  # LM training
QUIET = ["run.tensorboard=false", "run.console=false", "run.plot=false"]
TINY = ["policy.model=tiny-random", "game.max_rounds=2", "game.eval_every=1", "data.eval_size=4", "swarm.num_peers=2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tiny-model runs of the digits recipe, full weights and LoRA (2 peers, 2 rounds each)."""
    root = tmp_path_factory.mktemp("runs")
    run_recipe(load_recipe("reasoning_gym/digits", [*QUIET, *TINY, f"run.dir={root / 'full'}"]))
    run_recipe(load_recipe("reasoning_gym/digits", [*QUIET, *TINY, f"run.dir={root / 'lora'}", "+policy.lora.r=4"]))
    return root


def export(*args: str | Path) -> int:
    return main(["export", *map(str, args)])


def generates(folder: Path) -> Any:
    """The model loaded from ``folder``, once it generated from a prompt."""
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    inputs = tokenizer("What is 2 + 3?", return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    assert out.shape[1] > inputs["input_ids"].shape[1]
    return model


def test_a_peers_full_model_exports_loads_and_generates(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "peer-0-model"
    assert export(runs / "full" / "peer-0", "--out", out) == 0
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json", "README.md"} <= {p.name for p in out.iterdir()}
    assert not list(out.glob("*.pt")) and not list(out.glob("*.bin"))  # no optimizer state, no pickles
    generates(out)
    # The export is the trained policy of the checkpoint, byte for byte in its weights.
    checkpoint = runs / "full" / "peer-0" / "checkpoints" / "round_000001" / "policy" / "model"
    exported = transformers.AutoModelForCausalLM.from_pretrained(str(out)).state_dict()
    saved = transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint)).state_dict()
    assert exported.keys() == saved.keys() and all(torch.equal(exported[k], saved[k]) for k in saved)


def test_the_model_card_is_in_the_hubs_format_and_tells_game_rounds_metrics_swarm(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "carded"
    assert export(runs / "full" / "peer-1", "--out", out, "--base-model", "someone/tiny-base") == 0
    card = huggingface_hub.ModelCard.load(out / "README.md")
    assert card.data.base_model == "someone/tiny-base" and card.data.library_name == "transformers"
    assert {"genrl-swarm", "reinforcement-learning", "grpo", "digits"} <= set(card.data.tags)
    text = card.text
    assert "# digits: peer-1 after 2 rounds" in text and "- rounds played: 2 of 2" in text
    assert "genrl_swarm.data.digits.DigitArithmeticData" in text and "genrl_swarm.paradigms.lm.learner.GRPOLearner" in text
    assert "| `reward/own` |" in text and "| `eval/reward` |" in text and "| `train/loss`" not in text  # results, not operations
    assert "backend: `InMemoryBackend`" in text and "peers this one scored in its last round: peer-0, peer-1" in text
    # Without --base-model: the recipe's policy.model, only when it is a Hub id (tiny-random is not).
    assert export(runs / "full" / "peer-1", "--out", tmp_path / "plain") == 0
    assert huggingface_hub.ModelCard.load(tmp_path / "plain" / "README.md").data.base_model is None


def test_a_lora_peer_exports_a_peft_adapter_that_transformers_loads(runs: Path, tmp_path: Path) -> None:
    checkpoint = runs / "lora" / "peer-0" / "checkpoints" / "round_000001"
    out = tmp_path / "adapter"
    assert export(checkpoint, "--out", out) == 0  # one checkpoint named, not the peer's folder
    names = {p.name for p in out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "README.md"} <= names and "model.safetensors" not in names
    card = huggingface_hub.ModelCard.load(out / "README.md")
    assert card.data.library_name == "peft" and "lora" in card.data.tags
    model = generates(out)  # transformers reads the adapter's base (the local tiny model) and applies the adapter
    assert list(model.peft_config) == ["default"] and any("lora_A" in n for n, _ in model.named_parameters())
    # With the base's Hub id the adapter points at it, so the uploaded folder loads anywhere.
    assert export(checkpoint, "--out", tmp_path / "hub", "--base-model", "someone/tiny-base") == 0
    assert json.loads((tmp_path / "hub" / "adapter_config.json").read_text())["base_model_name_or_path"] == "someone/tiny-base"


def test_what_cannot_be_exported_is_one_line(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert export(runs / "full", "--out", tmp_path / "x") == 2  # the run's folder, not a peer's
    assert "name one of its peers (peer-0, peer-1)" in capsys.readouterr().err
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("keep")
    assert export(runs / "full" / "peer-0", "--out", tmp_path / "taken") == 2
    assert "exists and is not empty: pass --overwrite" in capsys.readouterr().err
    assert (tmp_path / "taken" / "mine.txt").read_text() == "keep"
    assert export(runs / "full" / "peer-0", "--out", tmp_path / "taken", "--overwrite") == 0
    assert not (tmp_path / "taken" / "mine.txt").exists() and (tmp_path / "taken" / "model.safetensors").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_a_game_without_a_language_model_says_so(bandit_recipe, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_recipe(bandit_recipe("game.max_rounds=1"))
    assert export(tmp_path / "run" / "peer-0", "--out", tmp_path / "bandit") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("genrl-swarm: run directory error:") and "only games whose policy is a language model" in err, err
