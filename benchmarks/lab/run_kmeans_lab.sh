#!/usr/bin/env bash
# The k-means lab on the GPU machine, in one command from the repository
# root: builds the lab programs twice with CMake (as they are, and with the
# kernels' trace hooks, -DTSM2_TRACE=ON), runs kmeans_lab with the
# production tuning and without the wide-row step, and the traced build on
# one case (cycles per phase of the wide-row step); then installs the package
# and runs the k-means GPU tests, their sanitizer sweep and
# benchmarks/kmeans_iter.py. Everything lands under $OUT; a short summary is
# printed last.
#
#   TREE=<commit> bash benchmarks/lab/run_kmeans_lab.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
# A copy of the tree without .git: pass TREE=<commit> to name it.
tree=${TREE:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree $tree, $(date -u +%F)"
echo "# $head" | tee "$OUT/provenance.txt"
cases="2.5e5x4096 k=16,2.5e5x4096 k=9,3072,2.5e5x2048 k=16,1536,2.5e5x1024 k=16,odd 20011x4092,odd 30011x2052,odd 17x1028,odd 1x4096"
py=$(command -v python3)
for build in lab lab-trace; do
  trace=OFF; [ "$build" = lab-trace ] && trace=ON
  cmake -S . -B "build/$build" -G Ninja -DTSM2_CUDA=ON -DTSM2_BUILD_LAB=ON -DTSM2_TRACE=$trace \
    -DPython_EXECUTABLE="$py" > "$OUT/cmake-$build.log" 2>&1 &&
    ninja -C "build/$build" kmeans_lab > "$OUT/build-$build.log" 2>&1 ||
    { tail -40 "$OUT/build-$build.log"; exit 1; }
done
{ echo "# $head; kmeans_lab \"$cases\" default,no_wide"
  build/lab/labs/kmeans_lab "$cases" default,no_wide; } > "$OUT/lab.txt" 2>&1
{ echo "# $head; kmeans_lab (TSM2_TRACE) \"2.5e5x4096 k=16\""
  build/lab-trace/labs/kmeans_lab "2.5e5x4096 k=16"; } > "$OUT/lab-trace.txt" 2>&1
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
grep -h -E "^f32 2.5e5x4096 k=16|trace" "$OUT"/lab*.txt
grep -E "^n=|fused  |plain  |read  |fused / read|plain / fused" "$OUT/iter.log"
