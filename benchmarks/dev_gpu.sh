#!/usr/bin/env bash
# Kernel development loop on the GPU machine, in one call: build with CMake,
# run the probe's correctness sweep and timings, then a compute-sanitizer
# memcheck over the small sweep. Output goes to $OUT when set.
#   PROBE=0 skips the probe, SANITIZE=0 the memcheck, PROFILE=1 adds an ncu
#   profile of the two headline cases, ERROR_PATHS="bad-shape ..." runs the
#   handler-error probes (each in its own process). The probe's timings are a
#   quick signal only: python -m jax_tsm2.bench is the reference (docs/benchmarking.md).
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
[ "${PROBE:-1}" = 1 ] && python3 benchmarks/probe_kernels.py --ext 'build/dev/_tsm2_ext*.so' "$@" 2>&1 | tee "$OUT/probe.log"
if [ "${PROFILE:-0}" = 1 ]; then
  ncu --clock-control none -k regex:Tsm2Kernel -c 2 --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section LaunchStats python3 benchmarks/probe_kernels.py --ext 'build/dev/_tsm2_ext*.so' \
    --profile > "$OUT/ncu.txt" 2>&1
  grep -E "Tsm2Kernel|Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers|Stall|Issued Warp|No Eligible|Active Warps|Eligible Warps|Block Limit|Shared Memory Config|L2 Hit|Mem Busy|Max Bandwidth|One or More" "$OUT/ncu.txt" | head -90
fi
if [ "${SANITIZE:-1}" = 1 ]; then
  compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/probe_kernels.py \
    --ext 'build/dev/_tsm2_ext*.so' --check-only --small > "$OUT/memcheck.log" 2>&1
  tail -5 "$OUT/memcheck.log"
fi
