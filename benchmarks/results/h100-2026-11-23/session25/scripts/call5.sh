#!/usr/bin/env bash
# session 25 call 5: issue 6's bars again on f651ce9 (a second run), with scikit-learn's
# Lloyd iteration on this machine's CPU for both cases.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > /tmp/install.log 2>&1 || { tail -40 /tmp/install.log; exit 1; }
echo "install: $((SECONDS - t0)) s"
for r in 1 2; do
  t0=$SECONDS; extra=""; [ $r = 1 ] && extra="--sklearn"
  { echo "# $head; python3 benchmarks/kmeans_iter.py --repeats 15 $extra --out \$OUT/iter$r"; python3 benchmarks/kmeans_iter.py --repeats 15 $extra --out "$OUT/iter$r"; } > "$OUT/iter$r.log" 2>&1
  echo "iter $r ($((SECONDS - t0)) s)"
  grep -E "^n=|fused  |plain  |read  |fused / read|plain / fused|sklearn|rror" "$OUT/iter$r.log"
done
