#!/usr/bin/env bash
# Session 24, call 12: the copy-only probe at d = 512 with each tile's 16 rows as one dense
# 32 KB bulk copy (km_co_big: + build/labs/copyonly-bigcopy.diff, -DTSM2_KMW_BIGCOPY)
# against one 2 KB copy per row into the padded stage (km_copyonly), three rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
C="f32 1e6x512 k=16"
{ echo "# $head; build/labs/{km_copyonly,km_co_big} \"$C\", three rounds"
  for i in 1 2 3; do for b in km_copyonly km_co_big; do echo "## $b"; build/labs/$b "$C"; done; done; } > "$OUT/lab-copyonly-bigcopy.txt" 2>&1
grep -E "^##|^f32|ceiling" "$OUT/lab-copyonly-bigcopy.txt" | cut -c1-30,96-125
