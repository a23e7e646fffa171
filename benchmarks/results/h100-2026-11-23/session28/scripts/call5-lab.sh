#!/bin/bash
# Session 28, call 5 (kernel lab, lab-nopdl as in call 4): which of call 4's 256 copies
# brings the growth with m, A's or C's?
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for cfg in "A256:SC_A_COPIES=256" "C256:SC_C_COPIES=256" "AC256:SC_AC_COPIES=256" "A64:SC_A_COPIES=64" "C64:SC_C_COPIES=64"; do
  name=${cfg%%:*}; envs=${cfg#*:}
  echo "== $name ($envs)"
  env SC_A_ROTATE=1 SC_C_ROTATE=1 $envs timeout 60 build/labs/lab-nopdl "lib S" 4096 4096 2>&1 | grep -E "^lib S|FAIL|error" | cut -c1-75
done
