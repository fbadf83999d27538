#!/usr/bin/env bash
# Launch a game on NUM_NODES x NUM_PROC_PER_NODE processes with torchrun (one peer per process).
#
#   export NUM_PROC_PER_NODE=1 NUM_NODES=1 MASTER_ADDR=localhost MASTER_PORT=29500
#   ./scripts/train.sh $NUM_NODES $NUM_PROC_PER_NODE multistage_math recipe.yaml [key=value ...]
#
# <recipe> is a YAML path, or a file inside the game's folder (src/genrl_swarm/games/<game>/).
# Each rank writes its log to $LOG_DIR (default runs/<game>/logs) and its metrics and
# checkpoints under the recipe's run.dir/rank-<N>/. Extra arguments are recipe overrides
# (and --resume). Run this same command on every node, with the same MASTER_ADDR/PORT.
set -euo pipefail

if [ $# -lt 4 ]; then
  echo "usage: $0 NUM_NODES NUM_PROC_PER_NODE <game> <recipe.yaml> [key=value ...] [--resume]" >&2
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

log_dir=${LOG_DIR:-runs/$game/logs}
mkdir -p "$log_dir"
resume=()
overrides=()
for arg in "$@"; do
  if [ "$arg" = "--resume" ]; then resume=(--resume); else overrides+=("$arg"); fi
done

exec "$python" -m torch.distributed.run \
  --nnodes "$num_nodes" --nproc-per-node "$procs" \
  --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" \
  --log-dir "$log_dir" --redirects 3 --tee 3 \
  -m genrl_swarm.cli run --recipe "$target" "${resume[@]}" \
  communication._target_=genrl_swarm.comm.torch_dist.TorchBackend swarm.num_peers=1 "${overrides[@]}"
