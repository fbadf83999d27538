# Steps of a demo pipeline that stop the way `genrl-swarm run` does (docs/operations.md), for bash
# scripts to source. Why: a script waiting on a command in the foreground runs its traps only
# once that command has ended, and a script with no trap dies at once on SIGTERM and leaves its
# commands running (make sends SIGTERM to the script alone): `make demo-agent` stopped that way
# went on for minutes. Here each step runs in the background and the script waits for it, so a
# signal reaches the script at once; `stop` then gives every running step SIGTERM, once (a swarm
# saves its checkpoint, an evaluation ends), waits for them, and exits 130 (SIGINT) or 143 (SIGTERM).
# A terminal's Ctrl-C reaches only the script: bash starts background commands with SIGINT ignored.
#
#   . scripts/steps.sh; step cmd args...; step other...; await   # await fails if a step failed

_steps=()

say() {  # what the demo does next, at once (a step can take minutes before its first line)
  echo "$DEMO_NAME: $*"
}

stop() {  # $1: the signal's name, $2: its number
  trap '' INT TERM
  say "stopping ($1): every step still running stops (a swarm saves its checkpoint first)" >&2
  kill -TERM "${_steps[@]}" 2>/dev/null || true
  wait
  exit $((128 + $2))
}

trap 'stop SIGINT 2' INT
trap 'stop SIGTERM 15' TERM

step() {  # run a command in the background (a shell function given here must `exec` its command)
  "$@" &
  _steps+=($!)
}

await() {  # wait for every step started; fail with the status of a step that failed
  local pid status=0
  for pid in "${_steps[@]}"; do wait "$pid" || status=$?; done
  _steps=()
  return "$status"
}
