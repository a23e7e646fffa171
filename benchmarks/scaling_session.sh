#!/usr/bin/env bash
# One call on a machine with several GPUs: install jax_tsm2, run benchmarks/multi_gpu.py as one
# process with every GPU, then as one process per GPU (python -m jax_tsm2.launch), and leave
# the results in $OUT: scaling.tgz (everything: both runs' JSON, markdown, plots and logs,
# nvidia-smi, the install log) beside copies of the two markdown reports and plots. Prints
# both runs' summaries last (scaling_report.py: efficiency per device count, targets, checks).
#
#   bash benchmarks/scaling_session.sh
#
#   DEADLINE (seconds from the script's start, default 470): both runs end before it. Each is
#     given --time-budget for its share of what is left after the install (the first 55%),
#     and is stopped 60 s past it; each rewrites its files after every case, so a run cut
#     short keeps what it measured.
#   INSTALL=0 skips the pip install. ARGS adds arguments to both runs (e.g. "--modes
#     auto,prefer"); PROCESS_ARGS to the one-process-per-GPU run only.
set -uo pipefail
OUT=${OUT:-/tmp/out}
DEADLINE=${DEADLINE:-470}
DIR="$OUT/scaling"
mkdir -p "$DIR"
# NVLink multicast off in everything started here (docs/sharding.md says why).
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1

pack() {
  tar czf "$OUT/scaling.tgz" -C "$OUT" scaling
  for f in scaling.md scaling.png scaling-processes.md scaling-processes.png; do
    [ -f "$DIR/$f" ] && cp "$DIR/$f" "$OUT/"
  done
  rm -rf "$DIR"
}
trap pack EXIT

nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader |
  tee "$DIR/gpu.txt"
nvidia-smi topo -m > "$DIR/topology.txt" 2>&1
NGPU=$(nvidia-smi -L | grep -c '^GPU ')

if [ "${INSTALL:-1}" = 1 ]; then
  t0=$SECONDS
  python3 -m pip install --no-build-isolation --no-deps -e . > "$DIR/install.log" 2>&1 ||
    { tail -40 "$DIR/install.log"; exit 1; }
  echo "install: $((SECONDS - t0)) s"
fi

left=$((DEADLINE - SECONDS))
budget=$((left * 55 / 100))
t0=$SECONDS
timeout -k 10 $((budget + 60)) python3 benchmarks/multi_gpu.py --out "$DIR" \
  --time-budget "$budget" ${ARGS:-} > "$DIR/one-process.log" 2>&1
echo "one process, $NGPU GPUs: exit $?, $((SECONDS - t0)) s (budget $budget s)"

# What is left, less the processes' start (~20 s) and the 60 s margin.
budget=$((DEADLINE - SECONDS - 80))
t0=$SECONDS
if [ "$NGPU" -gt 1 ] && [ "$budget" -ge 30 ]; then
  python3 -m jax_tsm2.launch --nproc "$NGPU" --timeout $((budget + 60)) -- \
    python3 benchmarks/multi_gpu.py --out "$DIR" --time-budget "$budget" ${ARGS:-} \
    ${PROCESS_ARGS:-} > "$DIR/processes.log" 2>&1
  echo "one process per GPU, $NGPU processes: exit $?, $((SECONDS - t0)) s (budget $budget s)"
else
  echo "one process per GPU: not run ($NGPU GPUs, $budget s of budget)"
fi

files=()
for f in scaling.json scaling-processes.json; do
  [ -f "$DIR/$f" ] && files+=("$DIR/$f")
done
echo
python3 benchmarks/scaling_report.py ${files[@]+"${files[@]}"}
for log in one-process.log processes.log; do
  if [ -f "$DIR/$log" ] && grep -qE "Traceback|Error|error:" "$DIR/$log"; then
    echo; echo "--- $log (last lines)"; tail -25 "$DIR/$log"
  fi
done
