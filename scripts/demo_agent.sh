#!/usr/bin/env bash
# The agent demo with a supervised warm-up (issue 31): held-out success of SmolLM2-135M-Instruct
# on the calculator levels before anything, after a short warm-up on synthetic correct episodes
# the environment plays itself (games/agent/warmup.py, no download), and after multi-turn GRPO
# from the warmed-up model in a 2-peer swarm (recipe agent/demo: both peers on calculator-1,
# peer-0 adds calculator-2, peer-1 the full calculator). Greedy held-out episodes, seeds disjoint
# from training and warm-up (benchmarks/bench_agent_demo.py). Then the per-task reward table and
# <dir>/swarm/agent_reward_curve.png.
#
#   OMP_NUM_THREADS=1 scripts/demo_agent.sh [dir (runs/demo-agent-warm)] [rounds (3)] [key=value ...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
dir=${1:-runs/demo-agent-warm}
rounds=${2:-3}
shift $(($# < 2 ? $# : 2))
n=${AGENT_EVAL_N:-32}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$dir"
start=$SECONDS
phase() {  # name: the seconds since the start, to the terminal and <dir>/timings.txt
  echo "demo-agent: $1 done at $((SECONDS - start)) s (load $(cut -d' ' -f1 /proc/loadavg))" | tee -a "$dir/timings.txt"
}
: > "$dir/timings.txt"
eval_model() {  # model, name
  "$py" "$here/benchmarks/bench_agent_demo.py" --model "$1" --tasks calculator-1 calculator-2 --n "$n" \
    --max-new-tokens 24 --json "$dir/heldout_$2.json"
}
# One torch thread per process, two processes at a time on two cores: the untrained model's
# evaluation beside the warm-up, the three evaluations of trained models together at the end.
eval_model HuggingFaceTB/SmolLM2-135M-Instruct before &
before=$!
"$py" -m genrl_swarm.games.agent.warmup --out "$dir/warm" --tasks calculator-1 calculator-2 \
  --episodes 32 --epochs 2 --batch 8 --lr 3e-5
wait "$before"
phase "warm-up, and the held-out evaluation before it"
"$py" -m genrl_swarm.cli run --overwrite --recipe agent/demo policy.model="$dir/warm" game.max_rounds="$rounds" \
  run.dir="$dir/swarm" run.tensorboard=false "$@"
phase "GRPO rounds"
pids=()
eval_model "$dir/warm" warm & pids+=($!)
for peer in "$dir"/swarm/peer-*/; do eval_model "$peer" "after_$(basename "$peer")" & pids+=($!); done
for pid in "${pids[@]}"; do wait "$pid"; done
phase "held-out after the warm-up and after GRPO"
cp "$dir"/heldout_*.json "$dir/swarm/"  # the report prints them beside the training table
"$py" -m genrl_swarm.games.agent.report "$dir/swarm"
cat "$dir/timings.txt"
