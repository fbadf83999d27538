#!/usr/bin/env bash
# The GPU check (issue 47.8): the CUDA-relevant tests and a short sampler/GRPO benchmark on the
# tiny model, printed as one table, in under 10 minutes. Without a usable CUDA device it prints
# one line saying why and exits 2. What it runs and why: scripts/gpu_check.py (--list prints it).
#
#   scripts/gpu_check.sh            # PYTHON=... to use another interpreter than .venv's
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
if ! command -v "$PYTHON" >/dev/null; then  # a path, or a name on PATH (python3 on a GPU image)
  echo "gpu_check: no interpreter at $PYTHON: run make install first, or set PYTHON=/path/to/python" >&2
  exit 2
fi
exec "$PYTHON" scripts/gpu_check.py "$@"
