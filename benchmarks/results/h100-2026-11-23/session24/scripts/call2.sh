#!/usr/bin/env bash
# Session 24, call 2: why the chained fused iteration at d = 4096 is ~110 us over its step.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), tree ${TREE:-?}, $(date -u +%F)"
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > /tmp/install.log 2>&1 || { tail -40 /tmp/install.log; exit 1; }
echo "install: $((SECONDS - t0)) s"
{ echo "# $head; build/labs/iterdiag.py"; python3 build/labs/iterdiag.py 250000 4096; python3 build/labs/iterdiag.py 1000000 256; } > "$OUT/iterdiag.txt" 2>&1
cat "$OUT/iterdiag.txt"
grep -c "custom-call" "$OUT"/hlo-fused-chained-4096.txt; grep -o 'custom_call_target="[a-z_0-9]*"' "$OUT"/hlo-fused-chained-4096.txt | sort | uniq -c
grep -E "^ *(ROOT )?[a-z_.0-9-]+ = .* copy\(" "$OUT"/hlo-fused-chained-4096.txt | head
