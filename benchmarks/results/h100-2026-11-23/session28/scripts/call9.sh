#!/bin/bash
# Session 28, call 9 (tree as call 8, e78c3d5 kernels): f16 family S routed, the closest
# bf16 cases of call 8 again, and test_gpu_matmul's half-precision tests.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/install.log 2>&1 || { tail -30 $OUT/install.log; exit 1; }
echo "install $((SECONDS - t0)) s"
t0=$SECONDS
timeout 150 python3 -m jax_tsm2.bench --out $OUT/bench-s-f16 --family S --dtype f16 --model > $OUT/bench-s-f16.log 2>&1
echo "f16 bench $((SECONDS - t0)) s"
grep -E "^\| (family|S) \|" $OUT/bench-s-f16/bench.md | cut -d'|' -f3,6,7,10,11,13,14,15,16,17,18
grep -E "^- issue 4" $OUT/bench-s-f16/bench.md
grep -A10 "^## Bar misses" $OUT/bench-s-f16/bench.md
t0=$SECONDS
timeout 100 python3 -m jax_tsm2.bench --out $OUT/rep --case S:8x4096x4096,S:16x8192x14336,S:8x8192x14336 --dtype bf16 > $OUT/rep.log 2>&1
echo "repeat $((SECONDS - t0)) s"
grep -E "^\| (family|S) \|" $OUT/rep/bench.md | cut -d'|' -f3,6,12,13,16,17
t0=$SECONDS
timeout $((590 - SECONDS)) python3 -m pytest -q -m gpu tests/test_gpu_matmul.py -k "bfloat16 or float16 or bf16 or f16" > $OUT/pytest-matmul-half.log 2>&1
echo "matmul half $((SECONDS - t0)) s: $(tail -n 1 $OUT/pytest-matmul-half.log)"
cd $OUT && tar czf /tmp/call.tgz --exclude='install*.log' . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call9.tgz
