#!/bin/bash
# Session 29, call 2: kernel lab, TN cases, T plans aiming for 2 blocks per SM (one wave;
# kl_t2, the tree) against 4 (kl_t4, as before). Then call2_hlo.py (XLA's NT dot, DEFAULT
# against HIGHEST precision).
# Prediction: f64 1e6x16x256 from ~742 to ~720-730 us; other CUDA-core tiles (1e7x16x16,
# 1e6x512x8) a little faster or the same; tensor-core tiles unchanged (already 2).
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for b in kl_t4 kl_t2 kl_t4 kl_t2; do echo "== $b"; build/labs/$b "TN " 2>&1 | grep -v "^ *$"; done
XLA_PYTHON_CLIENT_PREALLOCATE=false python3 benchmarks/results/h100-2026-11-23/session29/scripts/call2_hlo.py 2>&1 | cut -c1-400
