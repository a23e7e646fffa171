#!/usr/bin/env bash
# session 25 call 2: why the tensor-map step is slower than its copies allow.
# ncu on km_base / km_tma at d=4096; probe depth limits (km_co_swz_a2/_a3: the swizzled
# probe built with -DTSM2_KMW_AHEAD=2/3 from variants/copy-only-probe-tma-ahead.diff);
# km_tma_lag2 (9f5ce0a + variants/tma-lag-and-trunc.diff, -DTSM2_KMW_LAG=2).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
head="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(date -u +%F)"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed.sum,sm__inst_executed_pipe_lsu.sum,smsp__cycles_active.avg
{ echo "# $head; ncu km_base vs km_tma (70c194b / 9f5ce0a), f32 2.5e5x4096 k=16"
  for b in km_base km_tma; do echo "## $b"
    timeout 200 ncu -k regex:KmeansWide --launch-skip 4 --launch-count 1 --metrics $M --section WarpStateStats --section SchedulerStats build/labs/$b "f32 2.5e5x4096 k=16" 2>&1 | grep -vE "^==PROF==|^f32|^read" ; done; } > "$OUT/ncu-tma.txt" 2>&1
C="f32 2.5e5x4096 k=16,f32 1e6x512 k=16"
{ echo "# $head; probe km_co_tma_swz (no limit) / _a2 / _a3 (at most 2 / 3 tiles in flight), km_base, km_tma, km_tma_lag2; \"$C\" + more, two rounds"
  for i in 1 2; do
    for b in km_co_tma_swz km_co_swz_a2 km_co_swz_a3; do echo "## $b"; timeout 120 build/labs/$b "$C"; done
    for b in km_base km_tma km_tma_lag2; do echo "## $b"; timeout 120 build/labs/$b "$C,f32 2.5e5x2048 k=16,f32 5e5x768 k=16"; done
  done; } > "$OUT/lab-depth.txt" 2>&1
grep -E "^##|^f32" "$OUT/lab-depth.txt" | cut -c1-30,96-140
grep -E "^##|Duration|dram__|bank|wavefronts|inst_exec|Stall|Issued Warp|No Eligible|Active Warps|cycles_active" "$OUT/ncu-tma.txt" | head -60
