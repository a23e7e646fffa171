#!/bin/bash
# Session 29, call 7: kernel lab, every TN f64 case (with 16x128, 128x16, 256x16 added),
# split sums discarding their lines: f64 tiles with an edge of 16 on CUDA cores (kl_disc)
# or on FP64 MMAs (kl_dmma; call 6: 16 x 256 722.6 against 731.2 us).
# Prediction: the three new edge-16 tiles faster or equal on MMAs; the rest identical.
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2; do for b in kl_disc kl_dmma; do
  echo "== $b round $r"; build/labs/$b "TN f64" 2>&1 | grep -v "^ *$"
done; done
