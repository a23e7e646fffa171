// f64 on tensor cores (DMMA, sm_80 and later): products of 16 rows by 8
// columns by 4 k with f64 accumulators, the operands and sums IEEE doubles,
// so a kernel that sums on them keeps f64 accuracy (only the order of the
// additions changes).
#pragma once

namespace tsm2 {

// d += a * b for 16 rows (PTX fragment layouts): lane (g, q) = (lane / 4,
// lane % 4) holds A[g][q] (a0), A[g + 8][q] (a1) and B[q][g], and d = C[g][2q],
// C[g][2q + 1], C[g + 8][2q], C[g + 8][2q + 1].
//
// sm_90 takes the 16 rows in one m16n8k4 DMMA: there m8n8k4 issues at half
// the tensor cores' f64 rate (on an H200, 33 against 66 TFLOP/s for m16n8k4,
// m16n8k8 and m16n8k16 alike), which capped TSM2R at 64 columns at a third
// of the memory floor. Its fragments are those of two m8n8k4 products, rows
// g and g + 8, which sm_80 and sm_86/89 (no m16n8k4 for f64) issue instead.
__device__ __forceinline__ void MmaF64(double (&d)[4], double a0, double a1, double b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
      "{%0, %1, %2, %3};\n"
      : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
      : "d"(a0), "d"(a1), "d"(b));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
               : "+d"(d[0]), "+d"(d[1])
               : "d"(a0), "d"(b));
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
               : "+d"(d[2]), "+d"(d[3])
               : "d"(a1), "d"(b));
#else
  __trap();  // launchers check the device first
#endif
}

}  // namespace tsm2
