#!/usr/bin/env bash
# session 25 call 3: fewer math instructions in the cluster step.
# Binaries: km_base (70c194b), km_tma (9f5ce0a), km_*_nr / _nrnw (each tree + variants/base-trunc-macros.diff or tma-lag-and-trunc.diff, -DTSM2_KMW_NR [-DTSM2_KMW_NOW]).
# _nr: X's split without the lo rounding add; _nrnw: also no weight multiply (sums wrong unless w = 1).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(date -u +%F)"
C="f32 2.5e5x4096 k=16,f32 2.5e5x2048 k=16,f32 2.5e5x1024 k=16,f32 1e6x512 k=16,f32 5e5x768 k=16"
{ echo "# $head; km_base (70c194b), km_tma (9f5ce0a), +_nr, +_nrnw; \"$C\", three rounds"
  for i in 1 2 3; do for b in km_base km_base_nr km_base_nrnw km_tma km_tma_nr km_tma_nrnw; do echo "## $b"; timeout 120 build/labs/$b "$C"; done; done
  echo "## odd cases"; for b in km_base_nr km_tma_nr; do echo "## $b"; timeout 60 build/labs/$b "odd 20011x4092,odd 30011x2052,odd 17x1028,odd 23x388,odd 4099x772"; done
} > "$OUT/lab-nr.txt" 2>&1
grep -E "^##|^f32" "$OUT/lab-nr.txt" | cut -c1-24,112-132,145-175
