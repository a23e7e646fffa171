#!/bin/bash
# Session 27, call 2: the early-dependents plan (split_plans.h TSM2_S_TMA_EARLY) in
# the lab (A and B rotated) against 0 and against 4/6 stages, then installed:
# the tensor-map tests, bf16 and f16 family S through the harness.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for b in s_lib s_lib_noearly s_lib_g6 s_lib_g4; do
  for kn in "4096 4096" "8192 14336"; do
    [ "$b" != s_lib ] && [ "$kn" = "8192 14336" ] && continue
    echo "== $b $kn" >> $OUT/lab.txt
    SC_A_ROTATE=1 build/labs/$b "lib S" $kn 2>&1 | grep -v "^# max active" >> $OUT/lab.txt
  done
done
grep -E "^==|^lib S" $OUT/lab.txt | awk '/^==/{print; next}{printf "  m=%s %s\n", $3, $6}' | paste -sd' ' | sed 's/ == /\n== /g'
echo
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/install.log 2>&1 || { tail -30 $OUT/install.log; exit 1; }
echo "install $((SECONDS - t0)) s"
t0=$SECONDS
python3 -m pytest -q -m gpu tests/test_gpu_layouts.py -k "tensor_maps or clusters" > $OUT/pytest-tma.log 2>&1
echo "tensor-map tests $((SECONDS - t0)) s: $(tail -1 $OUT/pytest-tma.log)"
grep -E "^FAILED" $OUT/pytest-tma.log | head -10
for d in bf16 f16; do
  t0=$SECONDS
  timeout 170 python3 -m jax_tsm2.bench --out $OUT/bench-s-$d --family S --dtype $d --model > $OUT/bench-s-$d.log 2>&1
  echo "bench $d $((SECONDS - t0)) s"
  grep -E "^- issue 4" $OUT/bench-s-$d/bench.md
  grep -A12 "^## Bar misses" $OUT/bench-s-$d/bench.md | head -14
done
