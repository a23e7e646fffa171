#!/bin/bash
# Session 28, call 2: where bf16 S m x 4096 x 4096's growth with m comes from in the harness
# (13.4 us at m = 1, 13.8 at 8, 14.0 at 16; the kernel lab without PDL shows 13.48-13.55).
# The same three cases, kernel and torch, under: the default build; XLA inlining traced
# command buffers; XLA's command buffers off; a build without PDL (TSM2_S_CLUSTER_PDL=0).
# Then the two ABFT sanitizer sweeps that call 1's time limit cut off.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/install.log 2>&1 || { tail -30 $OUT/install.log; exit 1; }
echo "install $((SECONDS - t0)) s"
cases="--case S:1x4096x4096 --case S:8x4096x4096 --case S:16x4096x4096 --dtype bf16 --impl tsm2,torch --short-repeats 31"
run() {  # name, then env assignments
  local name=$1; shift
  env "$@" timeout 90 python3 -m jax_tsm2.bench --out $OUT/$name $cases > $OUT/$name.log 2>&1
  echo "== $name ($*)"; grep -E "^\| S \|" $OUT/$name/bench.md | cut -d'|' -f3,6,12 || tail -3 $OUT/$name.log
}
run default
run inline XLA_FLAGS=--xla_gpu_command_buffer_inline_traced_commands=true
run cmdoff XLA_FLAGS=--xla_gpu_enable_command_buffer=
run default2
t0=$SECONDS
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_sanitizer.py -k "abft and (racecheck or synccheck)" > $OUT/pytest-abft-san.log 2>&1
echo "abft sanitizer $((SECONDS - t0)) s: $(tail -n 1 $OUT/pytest-abft-san.log)"
t0=$SECONDS
CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DTSM2_S_CLUSTER_PDL=0" python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/install-nopdl.log 2>&1 || { tail -30 $OUT/install-nopdl.log; }
echo "install without PDL $((SECONDS - t0)) s"
run nopdl
cd $OUT && tar czf /tmp/call.tgz --exclude='install*.log' . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call2.tgz
