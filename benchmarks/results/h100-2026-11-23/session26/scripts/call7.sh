#!/bin/bash
# Session 26, call 7: the tensor-map kernel's 64-column form planned for bf16/f16
# where 64+ tiles fit the clusters' wave (4096 x 4096). Family S (routing as in
# call 6, so the forced kernel column is the new plan), then the S GPU tests and
# the S sanitizer sweep.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/install.log 2>&1 || { tail -30 $OUT/install.log; exit 1; }
echo "install $((SECONDS - t0)) s"
t0=$SECONDS
timeout 240 python3 -m jax_tsm2.bench --out $OUT/bench-s --family S --model > $OUT/bench-s.log 2>&1
echo "bench $((SECONDS - t0)) s"
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/bench-s/bench.json"))
rows = {}
for r in d["records"]:
    if r.get("status") == "ok" and r.get("seconds"):
        rows.setdefault((r["case"], r["dtype"]), {})[r["impl"]] = r["seconds"] * 1e6
for (case, dt), v in sorted(rows.items()):
    print(f"{case:16s} {dt:5s} " + " ".join(f"{k}={x:.2f}" for k, x in sorted(v.items())))
PY
grep -E "^- issue 4 peers" $OUT/bench-s/bench.md
t0=$SECONDS
python3 -m pytest -q -m gpu tests/test_gpu_layouts.py -k "small_left" > $OUT/pytest-s.log 2>&1
echo "S tests $((SECONDS - t0)) s: $(tail -1 $OUT/pytest-s.log)"
grep -E "FAILED" $OUT/pytest-s.log | head -10
t0=$SECONDS
timeout $((590 - SECONDS)) python3 -m pytest -q -m gpu tests/test_gpu_sanitizer.py -k small_left > $OUT/pytest-s-san.log 2>&1
echo "sanitizer $((SECONDS - t0)) s: $(tail -1 $OUT/pytest-s-san.log)"
