#!/bin/bash
# Session 27, call 7: L2 cache hints on the tensor-map kernel's copies, without PDL:
# np_pfei (call 5's kernel), np_efb (B's boxes evict_first), np_ela (A's evict_last), both.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for b in np_pfei np_efb np_ela np_efb_ela np_pfei np_efb; do
  echo "== $b" >> $OUT/lab.txt
  SC_A_ROTATE=1 build/labs/$b "lib S" 4096 4096 2>&1 | grep -v "^# max active" >> $OUT/lab.txt
done
for b in np_pfei np_efb np_efb_ela; do
  echo "== $b 8192 14336" >> $OUT/lab.txt
  SC_A_ROTATE=1 build/labs/$b "lib S" 8192 14336 2>&1 | grep -v "^# max active" >> $OUT/lab.txt
done
grep -E "^==|^lib S" $OUT/lab.txt | awk '/^==/{print; next}{printf "  m=%s %s (err %s)\n", $3, $6, $13}' | paste -sd' ' | sed 's/ == /\n== /g'
