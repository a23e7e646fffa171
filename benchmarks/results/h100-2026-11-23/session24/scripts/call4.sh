#!/usr/bin/env bash
# Session 24, call 4: kmeans_iter with the implementations taking turns (chained, then
# independent), nvidia-smi sampling clocks, power and throttle reasons meanwhile.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > /tmp/install.log 2>&1 || { tail -40 /tmp/install.log; exit 1; }
echo "install: $((SECONDS - t0)) s"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,temperature.memory,clocks_throttle_reasons.active --format=csv -lms 200 > "$OUT/smi.csv" 2>&1 &
smi=$!
{ echo "# $head; python3 benchmarks/kmeans_iter.py --repeats 15 --out \$OUT/iter"; python3 benchmarks/kmeans_iter.py --repeats 15 --out "$OUT/iter"; } > "$OUT/iter.log" 2>&1
{ echo "# $head; python3 benchmarks/kmeans_iter.py --independent --repeats 15 --out \$OUT/iter-ind"; python3 benchmarks/kmeans_iter.py --independent --repeats 15 --out "$OUT/iter-ind"; } > "$OUT/iter-ind.log" 2>&1
kill $smi
grep -E "^n=|fused  |fused_step|plain  |read  |fused / read|plain / fused" "$OUT/iter.log" "$OUT/iter-ind.log"
awk -F', ' 'NR>1 {print $2, $3, $4, $5, $6, $7}' "$OUT/smi.csv" | sort | uniq -c | sort -rn | head -15
