#!/bin/bash
# Session 28, call 12 (same warm machine and tree as call 11): f16 family S routed.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/install.log 2>&1 || { tail -30 $OUT/install.log; exit 1; }
timeout 150 python3 -m jax_tsm2.bench --out $OUT/bench-s-f16 --family S --dtype f16 --model > $OUT/bench-s-f16.log 2>&1
grep -E "^\| (family|S) \|" $OUT/bench-s-f16/bench.md | cut -d'|' -f3,6,7,10,11,13,14,15,16,17,18
grep -E "^- issue 4" $OUT/bench-s-f16/bench.md
grep -A10 "^## Bar misses" $OUT/bench-s-f16/bench.md
cd $OUT && tar czf /tmp/call.tgz --exclude='install*.log' . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call12.tgz
