#!/bin/bash
# Session 29, call 8 (tree 699d894: one-wave T plans, FP64 MMAs on 16-wide f64 tiles,
# coalesced split sums that discard their lines, GRAD without f16): issue 4's full run, every dtype, on one machine:
# As call 1: NT, TN and GRAD in one harness run, then family S in a second (one run of all 52 cases
# would not leave the install room under the 600 s limit; S's run is given what is left
# through --time-budget, so a cut run still reports what it measured).
# Prediction: TN f64 1e6 x 16 x 256 ~724-727 us (call 1: 744.1, torch 728.8); other TN cases
# equal or up to 3% faster; NT, S and GRAD as call 1.
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
cd $OUT && tar czf /tmp/call.tgz --exclude='install*.log' . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call8.tgz
