#!/bin/bash
# Session 27, call 3: stages of the 64-column tensor-map form (lab: 5, 6, 7; 6 without
# early dependents; 6 without PDL at all), then the library at 6 stages in the harness,
# bf16 S at 4096 x 4096, with XLA's command buffers (default) and without.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for b in s_g5 s_g6 s_g7 s_g6_noearly s_g6_nopdl s_g5 s_g6; do
  echo "== $b 4096 4096" >> $OUT/lab.txt
  SC_A_ROTATE=1 build/labs/$b "lib S" 4096 4096 2>&1 | grep -v "^# max active" >> $OUT/lab.txt
done
grep -E "^==|^lib S" $OUT/lab.txt | awk '/^==/{print; next}{printf "  m=%s %s\n", $3, $6}' | paste -sd' ' | sed 's/ == /\n== /g'
echo
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/install.log 2>&1 || { tail -30 $OUT/install.log; exit 1; }
echo "install $((SECONDS - t0)) s"
for run in cmdbuf nocmdbuf cmdbuf2; do
  t0=$SECONDS
  flags=""; [ $run = nocmdbuf ] && flags="--xla_gpu_enable_command_buffer="
  XLA_FLAGS="$flags" timeout 120 python3 -m jax_tsm2.bench --out $OUT/bench-$run --family S --dtype bf16 --k 4096 --impl tsm2,jnp,torch > $OUT/bench-$run.log 2>&1
  echo "bench $run $((SECONDS - t0)) s"
  grep -E "^\| (family|S) \|" $OUT/bench-$run/bench.md
done
