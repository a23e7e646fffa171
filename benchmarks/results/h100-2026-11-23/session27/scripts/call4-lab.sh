#!/bin/bash
# Session 27, call 4: where the tensor-map kernel's time goes above a copy-only probe,
# without PDL (as XLA's command buffers launch it): lab builds np (library, 6 stages),
# np_noa (no A copies), np_nomma (no multiplies), np_noa_nomma, np_pf (tensor maps
# prefetched first); probes without (np) and with PDL (pdl).
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for b in np np_noa np_nomma np_noa_nomma np_pf np; do
  echo "== $b" >> $OUT/lab.txt
  SC_A_ROTATE=1 build/labs/$b "lib S,read" 4096 4096 2>&1 | grep -v "^# max active" >> $OUT/lab.txt
done
for b in np pdl; do
  echo "== $b probes" >> $OUT/lab.txt
  build/labs/$b "probe runs128" 4096 4096 2>&1 | grep -v "^# max active" >> $OUT/lab.txt
done
grep -E "^==|^lib S|^read|^probe" $OUT/lab.txt | awk '/^==/{print; next}/^lib/{printf "  m=%s %s\n", $3, $6; next}{print "  " $0}' 
