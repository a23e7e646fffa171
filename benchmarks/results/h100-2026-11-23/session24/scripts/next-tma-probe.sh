#!/usr/bin/env bash
# Not run in session 24 (no budget left): the copy-only probe with the producer's copies as
# 2-D tensor-map boxes. Build on the CPU machine from a tree with
# session24/variants/wide-copy-only-probe.diff and wide-copy-only-probe-tma-2d.diff applied:
#   B="nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -I. benchmarks/kmeans_lab.cu
#      ffi/launch_kmeans.cu ffi/launch_stream.cu -DTSM2_KMW_COPY_ONLY"
#   $B -o build/labs/km_copyonly
#   $B -DTSM2_KMW_TMA -o build/labs/km_co_tma                      # 2 boxes of 256 x 16
#   $B -DTSM2_KMW_TMA -DTSM2_KMW_TMA_BOX_COLS=32 -DTSM2_KMW_TMA_SWZ=1 \
#      -o build/labs/km_co_tma_swz                                 # 16 boxes of 32 x 16, 128-B swizzle
# then run this with carry ["build/labs"].
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
C="f32 2.5e5x4096 k=16,f32 2.5e5x2048 k=16,f32 2.5e5x1024 k=16,f32 1e6x512 k=16"
{ echo "# $head; build/labs/{km_copyonly,km_co_tma,km_co_tma_swz} \"$C\", three rounds"
  for i in 1 2 3; do for b in km_copyonly km_co_tma km_co_tma_swz; do echo "## $b"; build/labs/$b "$C"; done; done; } > "$OUT/lab-copyonly-tma.txt" 2>&1
grep -E "^##|^f32|rror" "$OUT/lab-copyonly-tma.txt" | cut -c1-30,96-125
