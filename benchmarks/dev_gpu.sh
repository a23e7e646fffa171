#!/usr/bin/env bash
# Kernel development loop on the GPU machine, in one call: build with CMake,
# run the probe's correctness sweep and timings, then a compute-sanitizer
# memcheck over the small sweep. Output goes to $OUT when set.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
cmake -S . -B build/dev -G Ninja -DTSM2_CUDA=ON -DPython_EXECUTABLE="$(which python3)" \
  > "$OUT/cmake.log" 2>&1 && ninja -C build/dev > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log" "$OUT/cmake.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
for w in ${ERROR_PATHS:-}; do
  python3 benchmarks/probe_kernels.py --ext 'build/dev/_tsm2_ext*.so' --error-path $w 2>&1 | tail -1
  echo "  (exit ${PIPESTATUS[0]})"
done
python3 benchmarks/probe_kernels.py --ext 'build/dev/_tsm2_ext*.so' "$@" 2>&1 | tee "$OUT/probe.log"
# Optional experiment: the same probe with another R tile, e.g. RTILE=32,8,8,2.
if [ -n "${RTILE:-}" ]; then
  cmake -S . -B build/alt -G Ninja -DTSM2_CUDA=ON -DPython_EXECUTABLE="$(which python3)" \
    -DCMAKE_CXX_FLAGS="-DTSM2_RTILE=$RTILE" -DCMAKE_CUDA_FLAGS="-DTSM2_RTILE=$RTILE" \
    > "$OUT/cmake-alt.log" 2>&1 && ninja -C build/alt > "$OUT/build-alt.log" 2>&1 || tail -30 "$OUT/build-alt.log"
  echo "=== R tile $RTILE"
  python3 benchmarks/probe_kernels.py --ext 'build/alt/_tsm2_ext*.so' --small --only R 2>&1 | tee "$OUT/probe-alt.log"
fi
if [ "${SANITIZE:-1}" = 1 ]; then
  compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/probe_kernels.py \
    --ext 'build/dev/_tsm2_ext*.so' --check-only --small > "$OUT/memcheck.log" 2>&1
  tail -5 "$OUT/memcheck.log"
fi
