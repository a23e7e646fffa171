#!/bin/bash
# Session 27, call 1: the library's tensor-map S kernel in the lab (TryLib,
# "lib S"), lab binaries built locally (see NOTES, "Session 27"), with A
# rotated per launch (SC_A_ROTATE=1, as the harness does) and without.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for b in s_base s_t1 s_t2 s_st s_t1st s_g4 s_g6; do
  for rot in 0 1; do
    echo "== $b rotate_a=$rot 4096 4096" | tee -a $OUT/lab.txt
    SC_A_ROTATE=$rot build/labs/$b "lib S" 4096 4096 2>&1 | grep -v "^# max active" | tee -a $OUT/lab.txt
  done
done
for b in s_base s_t1 s_t2 s_st; do
  echo "== $b rotate_a=1 8192 14336" | tee -a $OUT/lab.txt
  SC_A_ROTATE=1 build/labs/$b "lib S" 8192 14336 2>&1 | grep -v "^# max active" | tee -a $OUT/lab.txt
done
