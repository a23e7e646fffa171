#!/bin/bash
# Session 26, call 9 (same tree as call 8): the rest of the GPU suite: matmul,
# ABFT, k-means, and the sanitizer sweeps other than S (call 8 ran those).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/install.log 2>&1 || { tail -30 $OUT/install.log; exit 1; }
echo "install $((SECONDS - t0)) s"
t0=$SECONDS
timeout $((590 - SECONDS)) python3 -m pytest -q -m gpu tests/test_gpu_matmul.py tests/test_gpu_abft.py tests/test_gpu_kmeans.py tests/test_gpu_sanitizer.py -k "not small_left" > $OUT/pytest-rest.log 2>&1
echo "rest $((SECONDS - t0)) s: $(tail -1 $OUT/pytest-rest.log)"
grep -E "^FAILED" $OUT/pytest-rest.log | head -10
