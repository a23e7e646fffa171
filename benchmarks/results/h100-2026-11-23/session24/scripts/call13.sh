#!/usr/bin/env bash
# Session 24, call 13: the copy-only probe with the producer's copies as two 2-D tensor-map
# boxes of 256 x 16 a tile (km_co_tma: + build/labs/copyonly-tma.diff, -DTSM2_KMW_TMA; the
# stage written dense, which only the probe can afford) against one 2 KB bulk copy per row
# (km_copyonly), three rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
C="f32 2.5e5x4096 k=16,f32 2.5e5x2048 k=16,f32 2.5e5x1024 k=16,f32 1e6x512 k=16"
{ echo "# $head; build/labs/{km_copyonly,km_co_tma} \"$C\", three rounds"
  for i in 1 2 3; do for b in km_copyonly km_co_tma; do echo "## $b"; build/labs/$b "$C"; done; done; } > "$OUT/lab-copyonly-tma.txt" 2>&1
grep -E "^##|^f32|rror" "$OUT/lab-copyonly-tma.txt" | cut -c1-30,96-125
