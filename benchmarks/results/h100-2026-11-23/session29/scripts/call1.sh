#!/bin/bash
# Session 29, call 1 (tree c785781): issue 4's full run, every dtype, on one machine:
# NT, TN and GRAD in one harness run, then family S in a second (one run of all 52 cases
# would not leave the install room under the 600 s limit; S's run is given what is left
# through --time-budget, so a cut run still reports what it measured).
# Prediction: S bf16/f16 as session 28's calls 11-12 (10/10); NT/TN/GRAD as session 10,
# with TN f64 1e6 x 16 x 256 the one case at risk (0.99x of torch then).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/install.log 2>&1 || { tail -30 $OUT/install.log; exit 1; }
echo "install $((SECONDS - t0)) s"
run() {  # run NAME SECONDS ARGS...
  local name=$1 budget=$2; shift 2
  local t=$SECONDS
  timeout $((budget + 40)) python3 -m jax_tsm2.bench --out $OUT/$name --model --time-budget $budget \
    --dtype f32,f64,bf16,f16 "$@" > $OUT/$name.log 2>&1
  echo "$name: $((SECONDS - t)) s, rc $?"
  grep -E "^- issue 4" $OUT/$name/bench.md
  grep -A14 "^## Bar misses" $OUT/$name/bench.md
}
run bench-nt-tn-grad 230 --family NT,TN,GRAD
run bench-s $((540 - SECONDS)) --family S
cd $OUT && tar czf /tmp/call.tgz --exclude='install*.log' . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call1.tgz
