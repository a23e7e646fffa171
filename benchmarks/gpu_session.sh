#!/usr/bin/env bash
# One GPU-machine call: install jax_tsm2 against the jax there, run the GPU
# test suite, a compute-sanitizer memcheck sweep and the benchmark harness,
# and leave everything under $OUT. Prints a short summary last.
#
#   bash benchmarks/gpu_session.sh [extra args for python -m jax_tsm2.bench]
#   BENCH=0 / TESTS=0 skip a part; PYTEST_ARGS narrows the tests (default tests/).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/install.log" 2>&1 ||
  { tail -40 "$OUT/install.log"; exit 1; }
echo "install: $((SECONDS - t0)) s"

if [ "${TESTS:-1}" = 1 ]; then
  t0=$SECONDS
  python3 -m pytest -q -m gpu ${PYTEST_ARGS:-tests/} > "$OUT/pytest-gpu.log" 2>&1
  echo "gpu tests ($((SECONDS - t0)) s): $(tail -1 "$OUT/pytest-gpu.log")"
fi

if [ "${BENCH:-1}" = 1 ]; then
  t0=$SECONDS
  python3 -m jax_tsm2.bench --out "$OUT/bench" --plot "$@" > "$OUT/bench.log" 2>&1
  echo "bench ($((SECONDS - t0)) s):"
  sed -n '/^family/,$p' "$OUT/bench.log" | tail -60
fi
