#!/usr/bin/env bash
# Run Mava 57c8e64's ff_ippo / ff_mappo on CPU with the side-by-side settings and print the
# steady environment steps/s in one line.
#
#   usage: run_mava.sh lbf|rware ff_ippo|ff_mappo [extra hydra overrides...]
#
# Settings: num_envs 32 (NUM_ENVS), rollout_length 128, ppo_epochs 4, num_minibatches 2,
# total_timesteps 983040, everything else Mava's defaults except:
#   UBS (system.update_batch_size)  default 1 here (Mava's default is 2). With 1, the 32 envs are
#       all the envs per update (4096 env steps per update, 240 updates); with 2 Mava runs 2x32 envs.
#   NUM_EVAL (arch.num_evaluation)  default 120 here (Mava's default is 200). Mava asserts
#       num_updates > num_evaluation and runs num_evaluation * (num_updates // num_evaluation)
#       updates, so 120 evaluation intervals x 2 updates covers exactly 983040 steps with UBS=1.
#       With UBS=2 use e.g. NUM_EVAL=60 (120 updates of 8192 steps).
#   TOTAL (system.total_timesteps)  default 983040.
# No OMP/XLA environment variables are set (Mava sets none itself). Logging: console + marl-eval
# JSON under $RESULTS (no neptune, no tensorboard).
#
# "Steady steps/s" = median of Mava's own ACTOR "Steps per second" (env steps of one evaluation
# interval / wall time of its learn() call, evaluation excluded) over every interval except the
# first (which includes XLA compilation). Mava logs ACTOR metrics only for intervals in which at
# least one episode finished (RWARE: time_limit 500 > 256 steps per interval, so about every
# other interval is logged); the median is over the logged ones.
set -euo pipefail

SCEN=${1:?usage: run_mava.sh lbf|rware ff_ippo|ff_mappo [hydra overrides...]}
SYS=${2:?usage: run_mava.sh lbf|rware ff_ippo|ff_mappo [hydra overrides...]}
shift 2

VENV=${MAVA_VENV:-/work/mava-env}                       # see README.md: how to build it
MAVA_DIR=${MAVA_DIR:-/work/mava-side/src/mava-57c8e64}  # Mava 57c8e64's source tree (its configs are found from here)
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${MAVA_OUT:-$HERE/../../runs/mava}
NUM_ENVS=${NUM_ENVS:-32}
UBS=${UBS:-1}
NUM_EVAL=${NUM_EVAL:-120}
TOTAL=${TOTAL:-983040}

case "$SCEN" in
  lbf)   ENV_ARGS=(env=lbf env/scenario=2s-8x8-2p-2f-coop) ;;
  rware) ENV_ARGS=(env=rware env/scenario=tiny-2ag) ;;
  *) echo "scenario must be lbf or rware, got $SCEN" >&2; exit 2 ;;
esac
case "$SYS" in
  ff_ippo|ff_mappo) ;;
  *) echo "system must be ff_ippo or ff_mappo, got $SYS" >&2; exit 2 ;;
esac

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT/logs"
LOG="$OUT/logs/${SYS}_${SCEN}_${STAMP}.log"
RESULTS=${RESULTS:-$OUT/results/${SYS}_${SCEN}_${STAMP}}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date +%s.%N)
set +e
( cd "$MAVA_DIR" && "$VENV/bin/python" "mava/systems/ppo/anakin/${SYS}.py" \
    "${ENV_ARGS[@]}" \
    arch.num_envs="$NUM_ENVS" system.rollout_length=128 system.ppo_epochs=4 system.num_minibatches=2 \
    system.update_batch_size="$UBS" system.total_timesteps="$TOTAL" arch.num_evaluation="$NUM_EVAL" \
    logger.use_console=True logger.use_json=True logger.use_neptune=False logger.use_tb=False \
    logger.base_exp_path="$RESULTS" \
    "$@" ) >"$LOG" 2>&1
RC=$?
set -e
T1=$(date +%s.%N)
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

if [ $RC -ne 0 ]; then
  echo "mava $SYS $SCEN FAILED rc=$RC, log: $LOG" >&2
  tail -30 "$LOG" >&2
  exit $RC
fi

"$VENV/bin/python" - "$LOG" "$T0" "$T1" "$SYS" "$SCEN" "$UBS" "$NUM_EVAL" "$TOTAL" "$LOAD_BEFORE" "$LOAD_AFTER" <<'EOF'
import re, statistics, sys
log, t0, t1, system, scen, ubs, nev, total, lb, la = sys.argv[1:]
ansi = re.compile(r"\x1b\[[0-9;]*m")
ts = None; sps = []; steps = []
for line in open(log, errors="replace"):
    line = ansi.sub("", line).strip()
    m = re.match(r"MISC - Timestep: (\d+)", line)
    if m:
        ts = int(m.group(1)); steps.append(ts); continue
    m = re.match(r"ACTOR - Steps per second: ([0-9.]+)", line)
    if m and ts is not None:
        sps.append((ts, float(m.group(1))))
if not steps:
    sys.exit(f"no 'MISC - Timestep' lines in {log}")
first = min(steps)
steady = [v for t, v in sps if t != first]
if not steady:
    sys.exit(f"no ACTOR steps/s after the first interval in {log}")
med = statistics.median(steady)
print(f"mava {system} {scen}: steady_steps_per_s_median={med:.0f} "
      f"(n={len(steady)} intervals after the first, min={min(steady):.0f} max={max(steady):.0f}) "
      f"wall_s={float(t1) - float(t0):.1f} env_steps={max(steps)} update_batch_size={ubs} num_evaluation={nev} "
      f"load_before={lb.replace(' ', ',')} load_after={la.replace(' ', ',')} log={log}")
EOF
