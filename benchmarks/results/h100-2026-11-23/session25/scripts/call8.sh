#!/usr/bin/env bash
# session 25 call 8: the tensor-map step rebased onto f651ce9 (branch
# gpu-pending/session25-tma-trunc, 75443af: km_tma2) against main (902d6d5, kernels as
# f651ce9: km_main) on every wide shape of the lab, three rounds; km_tma2's odd cases.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(date -u +%F)"
C="f32 2.5e5x4096 k=16,f32 2.5e5x4096 k=9,f32 2.5e5x3072 k=16,f32 2.5e5x2048 k=16,f32 5e5x1536 k=16,f32 2.5e5x1024 k=16,f32 5e5x768 k=16,f32 1e6x512 k=16,f32 5e5x516 k=12,f32 1e6x384 k=16,f32 1e6x320 k=12,f32 1e6x260 k=16"
{ echo "# $head; trees 75443af (km_tma2), 902d6d5 (km_main); \"$C\", three rounds; then km_tma2 odd"
  for i in 1 2 3; do for b in km_main km_tma2; do echo "## $b"; timeout 120 build/labs/$b "$C"; done; done
  echo "## km_tma2 odd"; timeout 120 build/labs/km_tma2 "odd"; } > "$OUT/lab-tma2.txt" 2>&1
grep -E "odd" "$OUT/lab-tma2.txt" | grep -E "^f32" | grep -vc " ok " | sed 's/^/odd f32 cases not ok: /'
python3 - "$OUT/lab-tma2.txt" <<'PY'
import re, sys, collections
res = collections.OrderedDict(); b = None
for line in open(sys.argv[1]):
    if line.startswith("## "): b = line[3:].strip(); continue
    m = re.match(r"(f32 \S+ k=\d+).*?reads=([\d.]+)\s+(\S+)", line)
    if m and "odd" not in line: res.setdefault(m.group(1), {}).setdefault(b, []).append(m.group(2) + ("" if m.group(3) == "ok" else "!"))
for c, v in res.items(): print(f"{c:22s}", "  ".join(f"{k}: {' '.join(x)}" for k, x in v.items()))
PY
