#!/bin/bash
# Session 29, call 5: kernel lab, TN 1e6 x 16 x 256, the split-sum launch (kl_new: a block
# per 32 outputs, 8 warps over the splits, 8 loads in flight per thread) against:
#   kl_b16 / kl_b32  16 / 32 loads in flight per thread (264 splits: 33 per warp)
#   kl_disc          each partial-sum line discarded from L2 once read (no write-back)
#   kl_empty         an empty kernel instead (call 4: 729 us for f64)
# Prediction (f64, call 4: new 735, empty 729): b16/b32 ~732 if the pass is latency-bound;
# disc ~732 if the write-back of 8.65 MB of partials costs the next kernel ~3 us.
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3; do for b in kl_new kl_b16 kl_b32 kl_disc kl_empty; do
  echo "== $b round $r"; build/labs/$b "1e6x16x256" 2>&1 | grep -v "^ *$"
done; done
