#!/bin/bash
# Session 27, call 9 (same warm machine and tree as call 8): the near-ties of call 8
# again, and test_gpu_matmul's half-precision tests (what the ~130 s of device time
# left allowed; the rest of the GPU suite did not run after this session's change).
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/install.log 2>&1; echo "install done $SECONDS"
timeout 60 python3 -m jax_tsm2.bench --out $OUT/rep --case S:8x4096x4096 --case S:4x4096x4096 --case S:16x8192x14336 --dtype bf16 > $OUT/rep.log 2>&1
grep -E "^\| (family|S) \|" $OUT/rep/bench.md | cut -d'|' -f3,6,12,13,16,17; echo "t=$SECONDS"
timeout $((175 - SECONDS)) python3 -m pytest -q -m gpu tests/test_gpu_matmul.py -k "bfloat16 or float16 or bf16 or f16" > $OUT/pytest-matmul-half.log 2>&1
echo "matmul half: $(tail -n 1 $OUT/pytest-matmul-half.log)"
