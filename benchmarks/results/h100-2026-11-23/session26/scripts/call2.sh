#!/bin/bash
# Session 26, call 2: the S lab's tensor-map variant (SC_SWEEP=3) beside the
# library kernel and the cp.async lab kernel (64 x 2, A per stage), at bf16
# m x 4096 x 4096 and m x 8192 x 14336.
set -u
build/labs/s_tma "" 4096 4096 2>&1 | tee $OUT/tma-4096.txt
build/labs/s_tma "" 8192 14336 2>&1 | tee $OUT/tma-14336.txt
