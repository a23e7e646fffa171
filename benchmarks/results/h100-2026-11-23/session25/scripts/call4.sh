#!/usr/bin/env bash
# session 25 call 4: SplitTf32Trunc (f651ce9) against 70c194b in the lab (mma and wide
# steps), its odd cases, then the package: kmeans_iter, the k-means GPU tests, sanitizers.
# Binaries: km_base (70c194b), km_new (f651ce9); the package from f651ce9.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
C="f32 1e6x256 k=16,f32 1e6x128 k=16,f32 1e6x256 k=32,f32 1e6x64 k=4,f32 2.5e5x4096 k=16,f32 1e6x512 k=16"
{ echo "# $head; build/labs/km_base (70c194b) vs km_new (f651ce9) \"$C\", three rounds; then km_new odd"
  for i in 1 2 3; do for b in km_base km_new; do echo "## $b"; timeout 120 build/labs/$b "$C"; done; done
  echo "## km_new odd"; timeout 120 build/labs/km_new "odd"; } > "$OUT/lab-trunc.txt" 2>&1
grep -E "^##|^f32" "$OUT/lab-trunc.txt" | grep -v "odd" | cut -c1-24,112-132
grep -E "odd" "$OUT/lab-trunc.txt" | grep -vc " ok " | sed 's/^/odd cases not ok: /'
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > /tmp/install.log 2>&1 || { tail -40 /tmp/install.log; exit 1; }
echo "install: $((SECONDS - t0)) s"
t0=$SECONDS
{ echo "# $head; python3 benchmarks/kmeans_iter.py --repeats 15 --out \$OUT/iter"; python3 benchmarks/kmeans_iter.py --repeats 15 --out "$OUT/iter"; } > "$OUT/iter.log" 2>&1
echo "iter ($((SECONDS - t0)) s)"
grep -E "^n=|fused  |plain  |read  |fused / read|plain / fused" "$OUT/iter.log"
t0=$SECONDS
{ echo "# $head; python3 -m pytest -q -m gpu tests/test_gpu_kmeans.py"; python3 -m pytest -q -m gpu tests/test_gpu_kmeans.py; } > "$OUT/test_gpu_kmeans.txt" 2>&1
echo "k-means tests ($((SECONDS - t0)) s): $(tail -1 "$OUT/test_gpu_kmeans.txt")"
t0=$SECONDS
{ echo "# $head; python3 -m pytest -q -s -m gpu tests/test_gpu_sanitizer.py -k kmeans"; python3 -m pytest -q -s -m gpu tests/test_gpu_sanitizer.py -k kmeans; } > "$OUT/sanitizer.txt" 2>&1
echo "sanitizers ($((SECONDS - t0)) s): $(tail -1 "$OUT/sanitizer.txt")"
