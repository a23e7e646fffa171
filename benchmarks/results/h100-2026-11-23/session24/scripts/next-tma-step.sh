#!/usr/bin/env bash
# Not run in session 24: the cluster step with tensor-map boxes (branch
# gpu-pending/session24-tma-swizzle) against main's step. Build on the CPU machine:
#   nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -I. benchmarks/kmeans_lab.cu \
#     ffi/launch_kmeans.cu ffi/launch_stream.cu -o build/labs/km_base     # in main
#   (the same in a worktree of the branch, -o .../build/labs/km_tma)
# A box entirely past d must still count its bytes on the mbarrier, or the step hangs:
# every lab run has a timeout.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
{ echo "# $head; build/labs/km_tma on the odd wide cases, then memcheck and synccheck"
  timeout 60 build/labs/km_tma "odd 20011x4092,odd 30011x2052,odd 17x1028,odd 1x4096,odd 23x388,odd 4099x772"
  timeout 120 compute-sanitizer --tool memcheck build/labs/km_tma "odd 17x1028,odd 23x388" | tail -3
  timeout 120 compute-sanitizer --tool synccheck build/labs/km_tma "odd 17x1028,odd 23x388" | tail -3
} > "$OUT/lab-tma-odd.txt" 2>&1
C="f32 2.5e5x4096 k=16,3072,2048 k=16,1536,1024 k=16,5e5x768,1e6x512,1e6x260"
{ echo "# $head; build/labs/{km_base,km_tma} \"$C\", two rounds"
  for i in 1 2; do for b in km_base km_tma; do echo "## $b"; timeout 120 build/labs/$b "$C"; done; done; } > "$OUT/lab-tma.txt" 2>&1
grep -E "^##|^f32|ERROR|rror" "$OUT"/lab-tma*.txt | cut -c1-40,100-160
