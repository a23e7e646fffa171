#!/bin/bash
# Session 28, call 10 (kernel lab, no PDL; library kernel as e78c3d5, A evict-first):
# does storing C evict-first (st.global.cs) help m = 16 at 8192 x 14336, the case still
# tied with torch in calls 8-9 (79.0-79.1 us against 79.1-79.2)? lab-cur: e78c3d5;
# lab-ccs: + C stored with st.global.cs. 256 copies of A and C (as the harness), then 7.
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for shape in "4096 4096" "8192 14336"; do
  for copies in 256 7; do
    for bin in lab-cur lab-ccs; do
      echo "== $bin, $shape, $copies copies of A and C"
      SC_A_ROTATE=1 SC_C_ROTATE=1 SC_AC_COPIES=$copies timeout 60 build/labs/$bin "lib S" $shape 2>&1 | grep -E "^lib S|FAIL|error" | cut -c1-75
    done
  done
done
