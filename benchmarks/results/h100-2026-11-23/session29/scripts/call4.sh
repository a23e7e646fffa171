#!/bin/bash
# Session 29, call 4: kernel lab, TN 1e6 x 16 x 256 (f32, f64, bf16), where the time after
# the main T kernel goes. Builds (all with one-wave T plans):
#   kl_new   split sums by a block of 256 threads per 32 outputs
#   kl_r1024 the same with 1024 threads (32 warps over the splits: 8-9 loads each, one batch)
#   kl_empty an empty kernel instead of the split sums (the main kernel's tail exposed)
#   kl_nosum no second launch (consecutive main kernels overlap head and tail)
# Prediction (f64): new 737, r1024 ~733, empty ~729, nosum 726.
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3; do for b in kl_new kl_r1024 kl_empty kl_nosum; do
  echo "== $b round $r"; build/labs/$b "1e6x16x256" 2>&1 | grep -v "^ *$"
done; done
