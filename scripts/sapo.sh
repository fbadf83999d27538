#!/usr/bin/env bash
# The SAPO paper's run (recipe reasoning_gym/sapo): one peer per GPU, on one machine or several.
#
#   ./scripts/sapo.sh                       # one machine, one peer per visible GPU
#   NUM_NODES=2 MASTER_ADDR=10.0.0.1 ./scripts/sapo.sh game.max_rounds=500   # run the same line on every machine
#
# Peers talk over torch.distributed (scripts/train.sh); each rank takes the GPU of its LOCAL_RANK.
# Extra arguments are Hydra overrides (and --resume).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
gpus=${GPUS_PER_NODE:-$(nvidia-smi -L 2>/dev/null | wc -l)}
if [ "$gpus" -lt 1 ]; then
  echo "sapo.sh: no GPU found (set GPUS_PER_NODE to run anyway; on a CPU use: genrl-swarm run --recipe reasoning_gym/sapo policy.model=tiny-random)" >&2
  exit 2
fi
exec "$here/train.sh" "${NUM_NODES:-1}" "$gpus" reasoning_gym sapo.yaml '++policy.device=cuda:${oc.env:LOCAL_RANK,0}' "$@"
