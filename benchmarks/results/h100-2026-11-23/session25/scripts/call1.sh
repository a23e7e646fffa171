#!/usr/bin/env bash
# session 25 call 1: the tensor-map copy-only probe, then the tensor-map step (branch) vs main.
# Binaries: km_copyonly, km_co_tma, km_co_tma_swz from 70c194b + session24/variants/
# wide-copy-only-probe-tma-2d.diff (flags in next-tma-probe.sh); km_base from 70c194b;
# km_tma from 9f5ce0a (branch gpu-pending/session24-tma-swizzle). (Rewritten from the
# session log after the run; the run used these two commands.)
set -uo pipefail
export TREE="probe: 70c194b + session24/variants/wide-copy-only-probe-tma-2d.diff; km_base 70c194b; km_tma 9f5ce0a"
bash benchmarks/results/h100-2026-11-23/session24/scripts/next-tma-probe.sh
echo ======
bash benchmarks/results/h100-2026-11-23/session24/scripts/next-tma-step.sh
