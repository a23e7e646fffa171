// f64 on tensor cores (DMMA, sm_80 and later): one m8n8k4 product with f64
// accumulators, the operands and sums IEEE doubles, so a kernel that sums on
// them keeps f64 accuracy (only the order of the additions changes).
#pragma once

namespace tsm2 {

// d += a * b, m8n8k4 (PTX fragment layouts): lane (g, q) = (lane / 4, lane %
// 4) holds A[g][q] and B[q][g], and d = C[g][2q], C[g][2q + 1].
__device__ __forceinline__ void MmaF64(double& d0, double& d1, double a, double b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
               : "+d"(d0), "+d"(d1)
               : "d"(a), "d"(b));
#else
  __trap();  // launchers check the device first
#endif
}

}  // namespace tsm2
