#!/bin/bash
# Session 28, call 4 (kernel lab, no install): does the harness's growth with m (bf16
# m x 4096 x 4096: 13.4 / 13.8 / 14.0 us at m = 1 / 8 / 16, with or without PDL in the
# build) show in the lab once it records launches as XLA does? Lab binaries built here
# from benchmarks/s_cluster_lab.cu (library kernel "lib S"), with PDL as the library
# builds it (lab-pdl) and without (lab-nopdl, -DSC_PDL=0 -DTSM2_S_CLUSTER_PDL=0).
#   base: A rotated (as session 27);  c: + each launch its own C;
#   child: + each launch its own child graph;  many: + 256 copies of A and C.
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for bin in lab-pdl lab-nopdl; do
  for cfg in "base:SC_A_ROTATE=1" "c:SC_A_ROTATE=1 SC_C_ROTATE=1" \
             "child:SC_A_ROTATE=1 SC_C_ROTATE=1 SC_CHILD=1" \
             "many:SC_A_ROTATE=1 SC_C_ROTATE=1 SC_CHILD=1 SC_AC_COPIES=256"; do
    name=${cfg%%:*}; envs=${cfg#*:}
    echo "== $bin $name ($envs)"
    env $envs timeout 60 build/labs/$bin "lib S" 4096 4096 2>&1 | grep -E "^lib S|FAIL|error" | cut -c1-110
  done
done
