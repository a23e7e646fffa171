#!/usr/bin/env bash
# Session 24, final call: HEAD's k-means GPU tests (incl. 650509e's non-finite cases, never
# run on a GPU before), the k-means sanitizer sweep, and kmeans_iter (chained, in turns).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > /tmp/install.log 2>&1 || { tail -40 /tmp/install.log; exit 1; }
echo "install: $((SECONDS - t0)) s"
t0=$SECONDS
{ echo "# $head; python3 -m pytest -q -m gpu tests/test_gpu_kmeans.py"; python3 -m pytest -q -m gpu tests/test_gpu_kmeans.py; } > "$OUT/test_gpu_kmeans.txt" 2>&1
echo "k-means tests ($((SECONDS - t0)) s): $(tail -1 "$OUT/test_gpu_kmeans.txt")"
t0=$SECONDS
{ echo "# $head; python3 -m pytest -q -s -m gpu tests/test_gpu_sanitizer.py -k kmeans"; python3 -m pytest -q -s -m gpu tests/test_gpu_sanitizer.py -k kmeans; } > "$OUT/sanitizer.txt" 2>&1
echo "sanitizers ($((SECONDS - t0)) s): $(tail -1 "$OUT/sanitizer.txt")"
t0=$SECONDS
{ echo "# $head; python3 benchmarks/kmeans_iter.py --repeats 15 --out \$OUT/iter"; python3 benchmarks/kmeans_iter.py --repeats 15 --out "$OUT/iter"; } > "$OUT/iter.log" 2>&1
echo "iter ($((SECONDS - t0)) s)"
grep -E "^n=|fused  |fused_step|plain  |read  |fused / read|plain / fused" "$OUT/iter.log"
