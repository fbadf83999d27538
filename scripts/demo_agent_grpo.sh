#!/usr/bin/env bash
# make demo-agent-grpo: multi-turn GRPO alone from the untrained SmolLM2-135M-Instruct (no
# warm-up), then greedy held-out success of the untrained model and of each peer
# (benchmarks/bench_agent_demo.py) and the report. Ctrl-C or SIGTERM stops every step (the swarm
# saves its checkpoint) and exits 130 / 143 (scripts/steps.sh).
#
#   scripts/demo_agent_grpo.sh <dir> [key=value ...]     (recipe agent; run.dir is <dir>)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
DEMO_NAME=demo-agent-grpo
. "$here/scripts/steps.sh"
py=${PYTHON:-$here/.venv/bin/python}
dir=$1
shift
n=${AGENT_EVAL_N:-32}
say "GRPO from the untrained model in a 2-peer swarm (recipe agent), then held-out evaluations ($n episodes)"
step "$py" -m genrl_swarm.cli run --overwrite --recipe agent run.dir="$dir" "$@"
await
say "held-out evaluations of the untrained model and of each peer, one after the other"
for model in HuggingFaceTB/SmolLM2-135M-Instruct "$dir"/peer-*/; do
  name=$(basename "$model")
  step "$py" "$here/benchmarks/bench_agent_demo.py" --n "$n" --model "$model" --json "$dir/heldout_${name/SmolLM2-135M-Instruct/before}.json"
  await
done
"$py" -m genrl_swarm.games.agent.report "$dir"
