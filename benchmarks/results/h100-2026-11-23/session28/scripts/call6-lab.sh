#!/bin/bash
# Session 28, call 6 (kernel lab, no PDL, A and C rotated over 256 copies as the harness's
# products): does warming A or C in L2 at the kernel's start take the growth with m away?
# lab-nopdl: the library kernel; lab-pa: + each block prefetches a slice of A into L2
# (cp.async.bulk.prefetch.L2); lab-pc: + the producer prefetches the block's m rows of C;
# lab-pac: both.
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for bin in lab-nopdl lab-pa lab-pc lab-pac lab-nopdl; do
  echo "== $bin AC256"
  SC_A_ROTATE=1 SC_C_ROTATE=1 SC_AC_COPIES=256 timeout 60 build/labs/$bin "lib S" 4096 4096 2>&1 | grep -E "^lib S|FAIL|error" | cut -c1-100
done
echo "== lab-pc, 7 copies"
SC_A_ROTATE=1 SC_C_ROTATE=1 timeout 60 build/labs/lab-pc "lib S" 4096 4096 2>&1 | grep -E "^lib S|FAIL|error" | cut -c1-100
