#!/usr/bin/env bash
# One GPU-machine call: install jax_tsm2 against the jax there, run the GPU
# tests and the benchmark harness, and leave everything under $OUT. Prints a
# short summary last.
#
#   bash benchmarks/gpu_session.sh [extra args for python -m jax_tsm2.bench]
#   BENCH=0 / TESTS=0 skip a part; PYTEST_ARGS narrows the tests (default tests/).
#   PYTEST_GROUPS='ARGS; ARGS; ...' runs these pytest argument lists side by
#     side instead, a process and a log each (shell quoting inside a list
#     holds). Tests only check results, so sharing the GPU is safe, and one
#     process leaves most of the machine's host cores idle (on an H100 machine the
#     matmul, ABFT/k-means and sanitizer tests ran together in 390 s).
#   PACK=1 leaves $OUT as one out.tgz, even after a failure (for runners that
#     bring back only a few files).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ "${PACK:-0}" = 1 ]; then
  trap 'tar czf /tmp/gpu_session_out.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* &&
    mv /tmp/gpu_session_out.tgz "$OUT/out.tgz"' EXIT
fi
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/install.log" 2>&1 ||
  { tail -40 "$OUT/install.log"; exit 1; }
echo "install: $((SECONDS - t0)) s"

if [ "${TESTS:-1}" = 1 ]; then
  t0=$SECONDS
  if [ -n "${PYTEST_GROUPS:-}" ]; then
    IFS=';' read -ra groups <<< "$PYTEST_GROUPS"
    for i in "${!groups[@]}"; do
      eval "python3 -m pytest -q -m gpu ${groups[$i]}" > "$OUT/pytest-gpu-$i.log" 2>&1 &
    done
    wait
    echo "gpu tests ($((SECONDS - t0)) s, ${#groups[@]} groups side by side):"
    for i in "${!groups[@]}"; do
      echo "  pytest-gpu-$i ($(echo ${groups[$i]})): $(tail -1 "$OUT/pytest-gpu-$i.log")"
    done
  else
    python3 -m pytest -q -m gpu ${PYTEST_ARGS:-tests/} > "$OUT/pytest-gpu.log" 2>&1
    echo "gpu tests ($((SECONDS - t0)) s): $(tail -1 "$OUT/pytest-gpu.log")"
  fi
fi

if [ "${BENCH:-1}" = 1 ]; then
  t0=$SECONDS
  python3 -m jax_tsm2.bench --out "$OUT/bench" --plot "$@" > "$OUT/bench.log" 2>&1
  echo "bench ($((SECONDS - t0)) s):"
  sed -n '/^family/,$p' "$OUT/bench.log" | tail -60
fi
