#!/bin/bash
# Session 28, call 11 (tree with C stored evict-first): bf16 family S routed, then the
# layouts GPU tests, test_gpu_matmul's half-precision tests and the S sanitizer sweep as
# three processes side by side (correctness only: no test times anything).
# Prediction: 16 x 8192 x 14336 from 79.0 to ~78.1 us (torch 79.1); the rest as call 8.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/install.log 2>&1 || { tail -30 $OUT/install.log; exit 1; }
echo "install $((SECONDS - t0)) s"
t0=$SECONDS
timeout 150 python3 -m jax_tsm2.bench --out $OUT/bench-s-bf16 --family S --dtype bf16 --model > $OUT/bench-s-bf16.log 2>&1
echo "bench $((SECONDS - t0)) s"
grep -E "^\| (family|S) \|" $OUT/bench-s-bf16/bench.md | cut -d'|' -f3,6,7,10,11,13,14,15,16,17,18
grep -E "^- issue 4" $OUT/bench-s-bf16/bench.md
grep -A10 "^## Bar misses" $OUT/bench-s-bf16/bench.md
t0=$SECONDS
lim=$((592 - SECONDS))
timeout $lim python3 -m pytest -q -m gpu tests/test_gpu_layouts.py > $OUT/pytest-layouts.log 2>&1 &
timeout $lim python3 -m pytest -q -m gpu tests/test_gpu_matmul.py -k "bfloat16 or float16 or bf16 or f16" > $OUT/pytest-matmul-half.log 2>&1 &
timeout $lim python3 -m pytest -q -m gpu tests/test_gpu_sanitizer.py -k small_left > $OUT/pytest-s-san.log 2>&1 &
wait
echo "tests $((SECONDS - t0)) s"
for f in layouts matmul-half s-san; do echo "$f: $(tail -n 1 $OUT/pytest-$f.log)"; grep -E "^FAILED|^ERROR" $OUT/pytest-$f.log | head -5; done
cd $OUT && tar czf /tmp/call.tgz --exclude='install*.log' . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call11.tgz
