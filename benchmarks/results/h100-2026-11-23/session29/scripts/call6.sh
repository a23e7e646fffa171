#!/bin/bash
# Session 29, call 6: kernel lab, TN 1e6 x 16 x 256. Split sums with each partial line
# discarded from L2 once read (kl_disc, call 5: f64 730.4 us), plus:
#   kl_disc32  32 loads in flight per thread (one batch for 264 splits)
#   kl_dmma    f64 16 x 256 on FP64 MMAs (tn_mma.cuh) instead of CUDA cores
#   kl_empty   an empty kernel instead of the split sums
# Prediction: disc32 = disc within noise; dmma ~725 if the CUDA-core loop costs the stream.
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3; do for b in kl_disc kl_disc32 kl_dmma kl_empty; do
  echo "== $b round $r"; build/labs/$b "1e6x16x256" 2>&1 | grep -v "^ *$"
done; done
