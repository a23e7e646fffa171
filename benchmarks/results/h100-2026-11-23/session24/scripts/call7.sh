#!/usr/bin/env bash
# Session 24, call 7: the producer copies with cp.async from 32 lanes (km_cpa: working tree on
# 44f3dbc) against one lane (km_base: 5b9ac08, same kernel as 44f3dbc), full step and
# data movement alone (km_copyonly, km_cpa_copyonly: + build/labs/copyonly.diff), alternated.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
C="f32 2.5e5x4096 k=16,f32 2.5e5x2048 k=16,f32 2.5e5x1024 k=16,f32 1e6x512 k=16"
{ echo "# $head; build/labs/{km_base,km_cpa,km_copyonly,km_cpa_copyonly} \"$C\", two rounds"
  for i in 1 2; do for b in km_base km_cpa km_copyonly km_cpa_copyonly; do echo "## $b"; build/labs/$b "$C"; done; done; } > "$OUT/lab-cpa.txt" 2>&1
{ echo "# $head; build/labs/km_cpa on every f32 wide case"; build/labs/km_cpa "f32 2.5e5x4096 k=9,3072,1536,5e5x768,5e5x516,1e6x260,1e6x384,1e6x320,odd 20011x4092,odd 30011x2052,odd 17x1028,odd 1x4096,odd 23x388,odd 4099x772"; } > "$OUT/lab-cpa-cases.txt" 2>&1
grep -E "^##|^f32" "$OUT/lab-cpa.txt" | cut -c1-30,96-150
grep -E "^f32" "$OUT/lab-cpa-cases.txt" | cut -c1-30,96-160
