"""``genrl-swarm export``: a peer's checkpoint as a model folder ``transformers`` loads, with a card.

Why a command: a checkpoint's ``policy/model/`` is already a ``save_pretrained`` folder, but it
sits beside the learner's optimizer state under a name that says nothing, and a LoRA adapter in
it points at its base through a local cache path. The export is that folder alone (safetensors,
config, tokenizer; or the PEFT adapter and tokenizer), an adapter pointed at its base's Hub id,
and a model card (``model_card.py``): ready for one ``hf upload``.

What the card tells (game, base model, swarm) comes from the recipe the peer recorded in its
folder (``recipe.yaml``), its checkpoint's books and its metrics. Written like a checkpoint, into
a hidden folder next to ``--out`` that is renamed into place once complete, so a failed export
leaves nothing that looks finished.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from genrl_swarm.config import COMPONENTS, load_recipe, resolve
from genrl_swarm.run.checkpoint import STATE_FILE, latest_checkpoint
from genrl_swarm.run.metrics import read_metrics
from genrl_swarm.run.model_card import CardFacts, render
from genrl_swarm.run.rundir import RECIPE_FILE, RunDirError
from genrl_swarm.run.storage import saving

ADAPTER_CONFIG = "adapter_config.json"
MODEL_FOLDER = Path("policy") / "model"  # where LMPolicy.save puts save_pretrained's output
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", type=Path, help="a peer's folder (runs/<name>/<peer>: its latest checkpoint) or one checkpoint (.../checkpoints/round_N)")
    p.add_argument("--out", required=True, type=Path, help="the folder to write (a Hub repository's content)")
    p.add_argument("--base-model", default=None, help="the base model's Hub id for the card (default: policy.model when it is one)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument("--recipe", default=None, help="for a run that did not record its recipe.yaml: the recipe it ran, with its overrides")
    p.add_argument("overrides", nargs="*", help="with --recipe: the run's Hydra overrides")


def run(args: argparse.Namespace) -> int:
    peer_dir, checkpoint = find_checkpoint(args.path)
    spec = resolve(recipe_of(peer_dir, args.recipe, args.overrides))
    state: dict[str, Any] = json.loads((checkpoint / STATE_FILE).read_text())
    metrics = peer_dir / "metrics.jsonl"
    rows = [r for r in read_metrics(metrics) if r.get("round", -1) <= state["round"]] if metrics.is_file() else [state.get("row", {})]
    facts = CardFacts(
        name=str(spec.get("name", "game")),
        recipe=args.recipe or str(peer_dir / RECIPE_FILE),
        peer=str(state.get("peer", peer_dir.name)),
        round=int(state["round"]),
        max_rounds=int(spec["game"]["max_rounds"]),
        stages=int(spec["game"]["num_stages"]),
        num_peers=int(spec["swarm"]["num_peers"]),
        base_model=args.base_model or hub_id(str((spec.get("policy") or {}).get("model", ""))),
        adapter=(checkpoint / MODEL_FOLDER / ADAPTER_CONFIG).is_file(),
        components={c: str(spec[c].get("_target_", "")) for c in COMPONENTS if isinstance(spec.get(c), dict)},
        state=state,
        rows=rows,
    )
    out = export(checkpoint / MODEL_FOLDER, args.out, facts, args.overwrite)
    kind = "a PEFT adapter" if facts.adapter else "a transformers model"
    print(f"exported {facts.peer}'s round {facts.round} ({checkpoint}) to {out}: {kind} and its model card (README.md)")
    print(f"upload it with: hf upload <user>/<repo> {out} .")
    return 0


def hub_id(model: str) -> str | None:
    """``model`` when the Hub knows it by that name: ``owner/name``, not a local folder (the
    offline SmolLM2 is loaded from a cache under its Hub id, so it is one; ``tiny-random`` is not)."""
    return model if HUB_ID.match(model) and not Path(model).expanduser().exists() else None


def find_checkpoint(path: Path) -> tuple[Path, Path]:
    """(peer folder, checkpoint folder) of ``path``, a peer folder or one of its checkpoints;
    RunDirError saying what ``path`` is instead."""
    if (path / STATE_FILE).is_file():  # a checkpoint: <peer>/checkpoints/round_N
        return path.parent.parent, path
    latest = latest_checkpoint(path / "checkpoints")
    if latest is None:
        peers = sorted(d.name for d in path.iterdir() if latest_checkpoint(d / "checkpoints")) if path.is_dir() else []
        hint = (
            f"it is a run folder: name one of its peers ({', '.join(peers)})"
            if peers
            else "run the recipe first: a run saves one after its last round"
        )
        raise RunDirError(f"{path} is neither a peer's folder with a checkpoint nor a checkpoint: {hint}")
    return path, latest[1]


def recipe_of(peer_dir: Path, recipe: str | None, overrides: list[str]) -> DictConfig:
    """The recipe the peer ran: ``--recipe`` with its overrides when given, else the one it
    recorded (``recipe.yaml``, written by every run since the export command exists)."""
    if recipe is not None:
        return load_recipe(recipe, overrides)
    recorded = peer_dir / RECIPE_FILE
    if not recorded.is_file():
        raise RunDirError(f"{peer_dir} holds no {RECIPE_FILE} (an older run): pass --recipe with the recipe and overrides it ran")
    loaded = OmegaConf.load(recorded)
    assert isinstance(loaded, DictConfig)
    return loaded


def export(model: Path, out: Path, facts: CardFacts, overwrite: bool = False) -> Path:
    """Copy the model folder ``model`` to ``out`` with ``facts``'s card; ``out`` is replaced only
    with ``overwrite``. The folder must hold weights as safetensors: what the Hub and
    ``from_pretrained`` read without running pickle."""
    if not model.is_dir():
        raise RunDirError(f"{model} does not exist: only games whose policy is a language model (LMPolicy and its kin) export a model")
    weights = "adapter_model.safetensors" if facts.adapter else "*.safetensors"
    if not any(model.glob(weights)):
        raise RunDirError(f"{model} holds no {weights}: the export carries safetensors weights only")
    if out.exists() and not overwrite and (out.is_file() or any(out.iterdir())):
        raise RunDirError(f"--out {out} exists and is not empty: pass --overwrite to replace it, or another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        with saving(tmp, named=out):
            for item in model.iterdir():
                if item.is_file() and item.name != "README.md":  # PEFT writes a blank card template
                    shutil.copy2(item, tmp / item.name)
            if facts.adapter and facts.base_model:
                point_adapter_at(tmp / ADAPTER_CONFIG, facts.base_model)
            (tmp / "README.md").write_text(render(facts))
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def point_adapter_at(config: Path, base: str) -> None:
    """Name the adapter's base by its Hub id (the checkpoint names the local folder it was
    loaded from, which exists on this machine only)."""
    data = json.loads(config.read_text())
    data["base_model_name_or_path"] = base
    config.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
