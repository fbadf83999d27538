#!/usr/bin/env bash
# The agent demo with a supervised warm-up (issue 31): held-out success of SmolLM2-135M-Instruct
# on the calculator levels before anything, after a short warm-up on synthetic correct episodes
# the environment plays itself (games/agent/warmup.py, no download), and after multi-turn GRPO
# from the warmed-up model in a 2-peer swarm (recipe agent/demo: both peers on calculator-1,
# peer-0 adds calculator-2, peer-1 the full calculator). Greedy held-out episodes, seeds disjoint
# from training and warm-up (benchmarks/bench_agent_demo.py). Then the per-task reward table and
# <dir>/swarm/agent_reward_curve.png. Ctrl-C or SIGTERM stops every step (the swarm saves its
# checkpoint) and exits 130 / 143 (scripts/steps.sh).
#
#   OMP_NUM_THREADS=1 scripts/demo_agent.sh [dir (runs/demo-agent-warm)] [rounds (3)] [key=value ...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
DEMO_NAME=demo-agent
. "$here/scripts/steps.sh"
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
eval_model() {  # model, name; run as a step (exec: the step's pid is the evaluation's own)
  exec "$py" "$here/benchmarks/bench_agent_demo.py" --model "$1" --tasks calculator-1 calculator-2 --n "$n" \
    --max-new-tokens 24 --json "$dir/heldout_$2.json"
}
# One torch thread per process, two processes at a time on two cores: the untrained model's
# evaluation beside the warm-up, the three evaluations of trained models together at the end.
say "held-out evaluation of the untrained model ($n episodes per level) beside a supervised warm-up (32 synthetic episodes, 2 epochs)"
step eval_model HuggingFaceTB/SmolLM2-135M-Instruct before
step "$py" -m genrl_swarm.games.agent.warmup --out "$dir/warm" --tasks calculator-1 calculator-2 \
  --episodes 32 --epochs 2 --batch 8 --lr 3e-5
await
phase "warm-up, and the held-out evaluation before it"
say "$rounds GRPO rounds from the warmed-up model in a 2-peer swarm (recipe agent/demo)"
step "$py" -m genrl_swarm.cli run --overwrite --recipe agent/demo policy.model="$dir/warm" game.max_rounds="$rounds" \
  run.dir="$dir/swarm" run.tensorboard=false "$@"
await
phase "GRPO rounds"
say "held-out evaluations of the warmed-up model and of each peer after GRPO"
step eval_model "$dir/warm" warm
for peer in "$dir"/swarm/peer-*/; do step eval_model "$peer" "after_$(basename "$peer")"; done
await
phase "held-out after the warm-up and after GRPO"
cp "$dir"/heldout_*.json "$dir/swarm/"  # the report prints them beside the training table
"$py" -m genrl_swarm.games.agent.report "$dir/swarm"
cat "$dir/timings.txt"
