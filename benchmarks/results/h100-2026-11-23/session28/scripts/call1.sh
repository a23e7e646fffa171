#!/bin/bash
# Session 28, call 1 (tree 0755a4b, kernels as 5c4325b): the part of the GPU suite that
# session 27 left unrun (test_gpu_matmul, ABFT, k-means, the non-S sanitizer sweeps), as
# three pytest processes side by side (correctness only: no test times anything), then
# f16 family S through the harness (routed since 9ba7e7c, not measured after 5c4325b).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/install.log 2>&1 || { tail -30 $OUT/install.log; exit 1; }
echo "install $((SECONDS - t0)) s"
t0=$SECONDS
lim=$((470 - SECONDS))
timeout $lim python3 -m pytest -q -m gpu tests/test_gpu_matmul.py > $OUT/pytest-matmul.log 2>&1 &
timeout $lim python3 -m pytest -q -m gpu tests/test_gpu_abft.py tests/test_gpu_kmeans.py > $OUT/pytest-abft-kmeans.log 2>&1 &
timeout $lim python3 -m pytest -q -m gpu tests/test_gpu_sanitizer.py -k "not small_left" > $OUT/pytest-sanitizer.log 2>&1 &
wait
echo "tests $((SECONDS - t0)) s"
for f in matmul abft-kmeans sanitizer; do echo "$f: $(tail -n 1 $OUT/pytest-$f.log)"; grep -E "^FAILED|^ERROR" $OUT/pytest-$f.log | head -5; done
t0=$SECONDS
timeout $((590 - SECONDS)) python3 -m jax_tsm2.bench --out $OUT/bench-s-f16 --family S --dtype f16 --model > $OUT/bench-s-f16.log 2>&1
echo "bench $((SECONDS - t0)) s"
grep -E "^\| (family|S) \|" $OUT/bench-s-f16/bench.md | cut -d'|' -f3,6,7,10,11,13,14,15,16,17,18
grep -E "^- issue 4" $OUT/bench-s-f16/bench.md
cd $OUT && tar czf /tmp/call.tgz --exclude=install.log . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call1.tgz
