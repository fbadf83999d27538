#!/usr/bin/env bash
# Build gensyn-genrl 0.3.0 (Gensyn's GenRL, the system this project re-implements) in its own
# venv, for benchmarks/bench_vs_genrl.py. Nothing of genrl enters this project's venv or code.
#
#   usage: benchmarks/genrl/install.sh            # venv in $GENRL_VENV (default /work/genrl-env)
#
# torch first and pinned to 2.13.0: genrl 0.3.0 requires `torch` unpinned, and any other torch
# spec pulls GBs of CUDA wheels. The rest is installed with torch held at 2.13.0 by a constraint,
# so pip fails (exit 3 here) instead of replacing it. What the rgym example needs beyond genrl's
# core requirements is reasoning-gym (its `examples` extra; the rest of that extra: trl,
# diffusers, langchain-sandbox, ollama, peft, are for other examples and not installed);
# reasoning-gym is pinned to the version this project's venv uses, so both sides generate the
# same datasets.
#
# Which torch 2.13.0 build: whatever pip's configured indexes give. On this project's CI-class
# machine pip's find-links (/opt/wheels) hold the CPU build (2.13.0+cpu, the one measured); elsewhere
# set TORCH_INDEX=https://download.pytorch.org/whl/cpu to get it instead of PyPI's CUDA build.
set -euo pipefail

VENV=${GENRL_VENV:-/work/genrl-env}
PY=${PYTHON:-python3}
GENRL=gensyn-genrl==0.3.0
TORCH=torch==2.13.0
RGYM=reasoning-gym==0.1.25

if [ ! -x "$VENV/bin/python" ]; then
  echo "install: venv $VENV"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/pip" install --quiet --disable-pip-version-check)
echo "install: $TORCH (first, alone)"
"${PIP[@]}" ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} "$TORCH"
CONSTRAINT=$(mktemp)
trap 'rm -f "$CONSTRAINT"' EXIT
echo "$TORCH" >"$CONSTRAINT"
echo "install: $GENRL $RGYM (torch held at 2.13.0)"
if ! "${PIP[@]}" -c "$CONSTRAINT" "$GENRL" "$RGYM"; then
  echo "install: $GENRL could not be installed next to $TORCH (see pip's reason above)" >&2
  exit 3
fi
GOT=$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')
case "$GOT" in
  2.13.0*) ;;
  *) echo "install: torch is $GOT after installing genrl, not 2.13.0: stop" >&2; exit 3 ;;
esac
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import genrl.examples.rgym.data, genrl.trainer.grpo_trainer, genrl.game.game_manager  # noqa: F401  the API the benchmark drives
print("install: ok:", ", ".join(f"{p} {md.version(p)}" for p in ("gensyn-genrl", "torch", "transformers", "reasoning-gym", "hivemind")))
PY
