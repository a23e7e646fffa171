#!/usr/bin/env bash
# Session 24, call 9: interleaved tiles (km_il) against contiguous ranges (km_base) on the
# other wide shapes, two rounds alternated.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
C="f32 2.5e5x4096 k=16,f32 2.5e5x4096 k=9,3072,1536,5e5x768,5e5x516,1e6x384,1e6x260,f32 2.5e5x1024 k=16,f32 1e6x512 k=16"
{ echo "# $head; build/labs/{km_base,km_il} \"$C\", two rounds"
  for i in 1 2; do for b in km_base km_il; do echo "## $b"; build/labs/$b "$C"; done; done; } > "$OUT/lab-il-shapes.txt" 2>&1
grep -E "^##|^f32" "$OUT/lab-il-shapes.txt" | cut -c1-30,96-125
