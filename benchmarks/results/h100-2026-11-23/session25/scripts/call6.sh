#!/usr/bin/env bash
# session 25 call 6: TSM2T f32 (tn_tf32.cuh) with SplitTf32Trunc for A and B (kl_trunc,
# 33ff974 + variants/tn-trunc.diff) against 33ff974 (kl_base), kernel lab, three rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(date -u +%F)"
{ echo "# $head; build/labs/kl_base (33ff974) vs kl_trunc (33ff974 + variants/tn-trunc.diff) \"TN f32\", three rounds"
  for i in 1 2 3; do for b in kl_base kl_trunc; do echo "## $b"; timeout 120 build/labs/$b "TN f32"; done; done; } > "$OUT/lab-tn-trunc.txt" 2>&1
grep -vE "^#|^read" "$OUT/lab-tn-trunc.txt" | cut -c1-150 | head -80
