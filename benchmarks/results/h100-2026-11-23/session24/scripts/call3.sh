#!/usr/bin/env bash
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > /tmp/install.log 2>&1 || { tail -40 /tmp/install.log; exit 1; }
echo "install: $((SECONDS - t0)) s"
{ echo "# $head; build/labs/iterdiag2.py 250000 4096 (command buffers on, then off)"
  python3 build/labs/iterdiag2.py 250000 4096
  echo "## XLA_FLAGS=--xla_gpu_enable_command_buffer="
  XLA_FLAGS=--xla_gpu_enable_command_buffer= python3 build/labs/iterdiag2.py 250000 4096
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv
} > "$OUT/iterdiag2.txt" 2>&1
cat "$OUT/iterdiag2.txt"
