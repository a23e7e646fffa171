#!/bin/bash
# Session 28, call 7 (kernel lab, no PDL). Reading of calls 5-6: the growth with m comes
# once A and C of recent launches fill ~32 MB of L2 at normal priority (A256 or C256 at
# m = 16, both at m = 8), and warming them does not help; B's evict-first policy may be
# what lets them pile up. lab-nopdl: the library kernel; lab-nohint: B without the
# evict-first policy; lab-aef: A's copies evict-first too; lab-ccs: C stored with
# st.global.cs (evict-first); lab-both: aef + ccs. Each with 256 copies of A and C, then 7.
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for copies in 256 7; do
  for bin in lab-nopdl lab-nohint lab-aef lab-ccs lab-both; do
    echo "== $bin, $copies copies of A and C"
    SC_A_ROTATE=1 SC_C_ROTATE=1 SC_AC_COPIES=$copies timeout 60 build/labs/$bin "lib S" 4096 4096 2>&1 | grep -E "^lib S|FAIL|error" | cut -c1-100
  done
done
