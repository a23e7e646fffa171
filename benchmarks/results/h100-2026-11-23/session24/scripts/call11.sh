#!/usr/bin/env bash
# Session 24, call 11: the cluster step's copy-only probe with at most 1, 2 or 4 tiles in
# flight (km_co_a1/a2/a4: + build/labs/copyonly-ahead.diff, -DTSM2_KMW_AHEAD=N) against no
# limit (km_copyonly, up to six), two rounds alternated.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
C="f32 2.5e5x4096 k=16,f32 2.5e5x1024 k=16,f32 1e6x512 k=16"
{ echo "# $head; build/labs/{km_copyonly,km_co_a1,km_co_a2,km_co_a4} \"$C\", two rounds"
  for i in 1 2; do for b in km_copyonly km_co_a1 km_co_a2 km_co_a4; do echo "## $b"; build/labs/$b "$C"; done; done; } > "$OUT/lab-copyonly-ahead.txt" 2>&1
grep -E "^##|^f32" "$OUT/lab-copyonly-ahead.txt" | cut -c1-30,96-125
