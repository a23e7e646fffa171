#!/usr/bin/env bash
# Session 24, call 1: the mma step's variants in the lab (base = HEAD 5b9ac08, A = first
# copies before the centroid split, AB = A + the split finish), then install the working
# tree (AB) and run the non-finite k-means tests and kmeans_iter (chained, the new default).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
C="f32 1e6x256 k=16,f32 1e6x128 k=16"
{ echo "# $head; build/labs/{km_base,km_A,km_AB} \"$C\", three rounds"
  for i in 1 2 3; do for b in km_base km_A km_AB; do echo "## $b"; build/labs/$b "$C"; done; done; } > "$OUT/lab-ab.txt" 2>&1
{ echo "# $head; build/labs/km_AB (correctness on the other cases)"
  build/labs/km_AB "f32 1e6x256 k=32,f32 odd,f32 1e6x64"; } > "$OUT/lab-ab-cases.txt" 2>&1
grep -E "^##|1e6x256 k=16|1e6x128" "$OUT/lab-ab.txt" | cut -c1-29,100-150
grep -c " ok " "$OUT/lab-ab-cases.txt"; grep -E "FAIL" "$OUT/lab-ab-cases.txt"
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > /tmp/install.log 2>&1 || { tail -40 /tmp/install.log; exit 1; }
echo "install: $((SECONDS - t0)) s"
t0=$SECONDS
python3 -m pytest -q -m gpu tests/test_gpu_kmeans.py -k "non_finite or mma or tensor" > "$OUT/test-subset.txt" 2>&1
echo "tests ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-subset.txt")"
t0=$SECONDS
python3 benchmarks/kmeans_iter.py --out "$OUT/iter" > "$OUT/iter.log" 2>&1
echo "iter ($((SECONDS - t0)) s)"
grep -E "^n=|fused  |fused_step|plain  |read  |fused / read|plain / fused" "$OUT/iter.log"
