#!/bin/bash
# Session 26, call 3: copy-only probes of column strips of B (RunProbes) beside a plain read.
mkdir -p $OUT; for s in "4096 4096" "8192 14336"; do build/labs/s_tma "probe,read" $s 2>&1 | grep -v "^#" | tee -a $OUT/probe.txt; done
