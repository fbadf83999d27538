#!/usr/bin/env bash
# Launch a game on NUM_NODES x NUM_PROC_PER_NODE processes with torchrun (one peer per process).
#
#   export NUM_PROC_PER_NODE=1 NUM_NODES=1 MASTER_ADDR=localhost MASTER_PORT=29500
#   ./scripts/train.sh $NUM_NODES $NUM_PROC_PER_NODE multistage_math recipe.yaml [key=value ...]
#
# <recipe> is a YAML path, or a file inside the game's folder (src/genrl_swarm/games/<game>/;
# `genrl-swarm games` lists them). The backend is the recipe's communication group, set here to
# torch (communication=torch swarm.num_peers=1). The recipe and the overrides are checked before
# torchrun starts, so a typo ends in one line, not in a traceback per rank. Each rank writes its
# log to $LOG_DIR (default runs/<game>/logs) and its metrics and checkpoints under the recipe's
# run.dir/<peer>/. Extra arguments are Hydra overrides (and --resume, or --overwrite to start a run over). Run this same command on every node, with the same MASTER_ADDR/PORT.
set -euo pipefail

if [ $# -lt 4 ]; then
  echo "usage: $0 NUM_NODES NUM_PROC_PER_NODE <game> <recipe.yaml> [key=value ...] [--resume | --overwrite]" >&2
  exit 2
fi
num_nodes=$1 procs=$2 game=$3 recipe=$4
shift 4
: "${MASTER_ADDR:=localhost}" "${MASTER_PORT:=29500}"

here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x "$here/.venv/bin/python" ]; then python="$here/.venv/bin/python"; else python=python3; fi
fi
if [ -f "$recipe" ]; then target=$recipe; else target="$game/$recipe"; fi

resume=()
overrides=()
for arg in "$@"; do
  case "$arg" in --resume | --overwrite) resume=("$arg") ;; *) overrides+=("$arg") ;; esac
done

recipe_args=(--recipe "$target" communication=torch swarm.num_peers=1 "${overrides[@]}")
if ! "$python" -m genrl_swarm.cli validate --no-build "${recipe_args[@]}" >/dev/null; then
  exit 2  # the CLI printed the one-line reason (for a missing recipe: the recipes that exist)
fi

log_dir=${LOG_DIR:-runs/$game/logs}
mkdir -p "$log_dir"

exec "$python" -m torch.distributed.run \
  --nnodes "$num_nodes" --nproc-per-node "$procs" \
  --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" \
  --log-dir "$log_dir" --redirects 3 --tee 3 \
  -m genrl_swarm.cli run "${resume[@]}" "${recipe_args[@]}"
