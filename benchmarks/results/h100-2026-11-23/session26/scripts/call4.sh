#!/bin/bash
# Session 26, call 4: the TMA lab kernel at 64 and 128 columns beside the library and cp.async lab kernels.
mkdir -p $OUT; for s in "4096 4096" "8192 14336"; do build/labs/s_tma "tma,lib,cluster" $s 2>&1 | grep -v "^#   cluster\|max active" | tee -a $OUT/tma128.txt; done
