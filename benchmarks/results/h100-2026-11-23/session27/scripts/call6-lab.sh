#!/bin/bash
# Session 27, call 6: the tensor-map kernel's consumers, without PDL (as XLA's command
# buffers launch it): np_pfei (call 5), np_rel (each warp releases a stage once its
# fragments are in registers, before the multiplies), np_nomma (no multiplies), stage
# shapes; pdl_rel with PDL.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for b in np_pfei np_rel np_nomma np_rel_s5 np_rel_r64s12 pdl_rel np_pfei np_rel; do
  echo "== $b" >> $OUT/lab.txt
  SC_A_ROTATE=1 build/labs/$b "lib S" 4096 4096 2>&1 | grep -v "^# max active" >> $OUT/lab.txt
done
for b in np_pfei np_rel; do
  echo "== $b 8192 14336" >> $OUT/lab.txt
  SC_A_ROTATE=1 build/labs/$b "lib S" 8192 14336 2>&1 | grep -v "^# max active" >> $OUT/lab.txt
done
grep -E "^==|^lib S" $OUT/lab.txt | awk '/^==/{print; next}{printf "  m=%s %s (err %s)\n", $3, $6, $13}' | paste -sd' ' | sed 's/ == /\n== /g'
