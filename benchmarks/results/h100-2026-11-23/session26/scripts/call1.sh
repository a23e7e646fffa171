#!/bin/bash
# Session 26, call 1: the S lab with the unsplit sweep (SC_SWEEP=2) beside the
# library kernel, at bf16 m x 4096 x 4096 and m x 8192 x 14336; and where
# cuBLAS's headers and libraries are on the GPU machine.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
build/labs/s_lab "" 4096 4096 2>&1 | tee $OUT/lab-4096.txt
build/labs/s_lab "" 8192 14336 2>&1 | tee $OUT/lab-14336.txt
python3 - <<'PY' 2>&1 | tee $OUT/cublas-where.txt
import glob, os, site
for d in site.getsitepackages():
    for p in glob.glob(os.path.join(d, "nvidia", "*", "include", "cublasLt.h")) + glob.glob(os.path.join(d, "nvidia", "*", "lib", "libcublasLt.so*")):
        print(p)
print(glob.glob("/usr/local/cuda*/include/cublasLt.h"), glob.glob("/usr/local/cuda*/lib64/libcublasLt.so*"))
PY
pip list 2>/dev/null | grep -i -E "nvidia|jax|torch" | tee -a $OUT/cublas-where.txt
