#!/bin/bash
# Session 27, call 5: the tensor-map kernel's start, without PDL (as XLA's command buffers
# launch it): np_base (as before), np_pf (maps prefetched), np_pfei (prefetch, and the
# producer issues the first stages before the block barrier), stage shapes; pdl_pfei with PDL.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for b in np_base np_pf np_pfei np_pfei_s5 np_pfei_s7 np_pfei_r64s10 np_pfei_r64s12 pdl_pfei np_base np_pfei; do
  echo "== $b" >> $OUT/lab.txt
  SC_A_ROTATE=1 build/labs/$b "lib S" 4096 4096 2>&1 | grep -v "^# max active" >> $OUT/lab.txt
done
for b in np_base np_pfei; do
  echo "== $b 8192 14336" >> $OUT/lab.txt
  SC_A_ROTATE=1 build/labs/$b "lib S" 8192 14336 2>&1 | grep -v "^# max active" >> $OUT/lab.txt
done
grep -E "^==|^lib S" $OUT/lab.txt | awk '/^==/{print; next}{printf "  m=%s %s (err %s)\n", $3, $6, $13}' | paste -sd' ' | sed 's/ == /\n== /g'
