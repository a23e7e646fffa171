#!/usr/bin/env bash
# Session 24, call 5: the cluster step's data movement alone (km_copyonly: HEAD's kernel with
# build/labs/copyonly.diff, -DTSM2_KMW_COPY_ONLY; its results are wrong by design) against
# the full step (km_base, a build of 5b9ac08), alternated.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
C="f32 2.5e5x4096 k=16,f32 2.5e5x2048 k=16,f32 2.5e5x1024 k=16,f32 1e6x512 k=16"
{ echo "# $head; build/labs/{km_base,km_copyonly} \"$C\", two rounds"
  for i in 1 2; do for b in km_base km_copyonly; do echo "## $b"; build/labs/$b "$C"; done; done; } > "$OUT/lab-copyonly.txt" 2>&1
grep -E "^##|^f32|ceiling" "$OUT/lab-copyonly.txt" | cut -c1-30,96-150
