#!/bin/bash
# Session 26, call 5: install the tree with small_left_tma.cuh, run the S GPU
# tests (tensor-map tiles, the cp.async tiles they displace, clusters) and the
# S sanitizer sweep, then family S of the harness.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/install.log 2>&1 || { tail -30 $OUT/install.log; exit 1; }
echo "install $((SECONDS - t0)) s"
t0=$SECONDS
python3 -m pytest -q -m gpu tests/test_gpu_layouts.py -k "tensor_maps or small_left_mma_tiles" -x > $OUT/pytest-s-tma.log 2>&1
echo "tma tests $((SECONDS - t0)) s: $(tail -1 $OUT/pytest-s-tma.log)"
grep -E "FAILED|Error" $OUT/pytest-s-tma.log | head -20
t0=$SECONDS
python3 -m pytest -q -m gpu tests/test_gpu_sanitizer.py -k small_left > $OUT/pytest-s-san.log 2>&1
echo "sanitizer $((SECONDS - t0)) s: $(tail -1 $OUT/pytest-s-san.log)"
grep -E "FAILED|rror" $OUT/pytest-s-san.log | head -20
t0=$SECONDS
timeout ${BENCH_S:-280} python3 -m jax_tsm2.bench --out $OUT/bench-s --family S --model > $OUT/bench-s.log 2>&1
echo "bench $((SECONDS - t0)) s"
sed -n '/^| family/,$p' $OUT/bench-s/bench.md 2>/dev/null | cut -d'|' -f2-6,17-19 | head -30
grep -A12 "^## Bar misses" $OUT/bench-s/bench.md 2>/dev/null
