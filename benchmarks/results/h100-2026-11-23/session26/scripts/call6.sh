#!/bin/bash
# Session 26, call 6 (tree 296cbf6): family S routed (the tensor-map kernel now
# takes bf16 8192 x 14336), then every GPU test of test_gpu_layouts.py.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/install.log 2>&1 || { tail -30 $OUT/install.log; exit 1; }
echo "install $((SECONDS - t0)) s"
t0=$SECONDS
timeout 240 python3 -m jax_tsm2.bench --out $OUT/bench-s --family S --model > $OUT/bench-s.log 2>&1
echo "bench $((SECONDS - t0)) s"
grep "bf16" $OUT/bench-s/bench.md | cut -d'|' -f3,6,12,13,15,16,17,18,19 | head -12
grep -E "^- (issue 4|read ceiling)" $OUT/bench-s/bench.md
grep -A12 "^## Bar misses" $OUT/bench-s/bench.md
t0=$SECONDS
timeout $((560 - SECONDS)) python3 -m pytest -q -m gpu tests/test_gpu_layouts.py > $OUT/pytest-layouts.log 2>&1
echo "layouts tests $((SECONDS - t0)) s: $(tail -1 $OUT/pytest-layouts.log)"
grep -E "FAILED" $OUT/pytest-layouts.log | head -10
