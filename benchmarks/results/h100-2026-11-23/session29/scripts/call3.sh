#!/bin/bash
# Session 29, call 3: kernel lab, TN cases, four builds in two rounds:
#   kl_t4    T plans aim for 4 blocks per SM (as before this session)
#   kl_t2    aim for 2 (one wave), rounded up
#   kl_new   aim for 2 rounded down (ChooseSplits one_wave), split sums by a block per
#            32 outputs with its warps over the splits (coalesced loads)
#   kl_nosum kl_new without the split-sum launch (wrong sums: what the second launch costs)
# Prediction: f64 1e6x16x256 kl_t2 734 -> kl_new ~729-731, kl_nosum ~724;
# bf16 539940x148x194 kl_new ~1.2 ms (260 blocks, one wave).
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2; do for b in kl_t4 kl_t2 kl_new kl_nosum; do
  echo "== $b round $r"; build/labs/$b "TN " 2>&1 | grep -v "^ *$"
done; done
