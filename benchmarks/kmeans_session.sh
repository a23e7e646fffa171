#!/usr/bin/env bash
# One GPU-machine call for the fused k-means step: the lab binaries (built
# here beforehand, carried in build/labs: km_wide from this tree, km_base with
# -DTSM2_KMEANS_WIDE=0, km_trace with -DTSM2_KMW_TRACE), then install, the
# k-means GPU tests, the k-means sanitizer sweep and benchmarks/kmeans_iter.py.
# Everything lands under $OUT; a short summary is printed last.
#
#   TREE=<commit> bash benchmarks/kmeans_session.sh   (on the GPU machine, repository root)
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
# The device's copy of the tree has no .git: pass TREE=<commit> to name it.
tree=${TREE:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree $tree, $(date -u +%F)"
echo "# $head" | tee "$OUT/provenance.txt"
cases="2.5e5x4096 k=16,2.5e5x4096 k=9,3072,2.5e5x2048 k=16,1536,2.5e5x1024 k=16,odd 20011x4092,odd 30011x2052,odd 17x1028,odd 1x4096"
if [ -x build/labs/km_wide ]; then
  { echo "# $head; build/labs/km_wide \"$cases\""; build/labs/km_wide "$cases"; } > "$OUT/lab-wide.txt" 2>&1
  { echo "# $head; build/labs/km_base (-DTSM2_KMEANS_WIDE=0)"; build/labs/km_base "$cases"; } > "$OUT/lab-base.txt" 2>&1
  { echo "# $head; build/labs/km_trace (-DTSM2_KMW_TRACE)"; build/labs/km_trace "2.5e5x4096 k=16"; } > "$OUT/lab-trace.txt" 2>&1
fi
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/install.log" 2>&1 ||
  { tail -40 "$OUT/install.log"; exit 1; }
echo "install: $((SECONDS - t0)) s"
python3 benchmarks/kmeans_iter.py --out "$OUT/iter" > "$OUT/iter.log" 2>&1
t0=$SECONDS
python3 -m pytest -q -m gpu tests/test_gpu_kmeans.py > "$OUT/test_gpu_kmeans.txt" 2>&1
echo "k-means tests ($((SECONDS - t0)) s): $(tail -1 "$OUT/test_gpu_kmeans.txt")"
t0=$SECONDS
python3 -m pytest -q -s -m gpu tests/test_gpu_sanitizer.py -k kmeans > "$OUT/sanitizer.txt" 2>&1
echo "sanitizers ($((SECONDS - t0)) s): $(tail -1 "$OUT/sanitizer.txt")"
grep -h -E "^f32 2.5e5x4096 k=16|trace" "$OUT"/lab-*.txt
grep -E "^n=|fused  |plain  |read  |fused / read|plain / fused" "$OUT/iter.log"
