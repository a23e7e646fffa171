// TF32 tensor-core helpers for kernels that keep f32 accuracy ("3xTF32"):
// each f32 operand is split into a high and a low TF32 part, x = hi + lo, and
// a product is taken as hi*hi + hi*lo + lo*hi (lo*lo is below f32 rounding).
// Used by the k-means steps (kmeans_mma.cuh, kmeans_wide.cuh) and TSM2T's
// f32 tiles (tn_tf32.cuh). CUDA only; mma.sync TF32 needs sm_80.
#pragma once

#include <cstdint>

namespace tsm2 {

// x = hi + lo, hi = x with its low 13 bits cleared (exact), lo = x - hi
// (exact in f32) biased by half a TF32 ulp: the tensor cores read only the
// top 19 bits of a .tf32 operand (what CUTLASS's 3xTF32 also relies on), so
// lo is rounded to nearest on the way in. |lo| < 2^-10 |x|, its rounding
// error < 2^-21 |x|. Three instructions per element (sm_90 compiles
// cvt.rna.tf32 to integer operations plus a NaN check). Non-finite x may come
// out wrong (Inf gives lo = NaN): callers keep those off the tensor cores.
__device__ __forceinline__ void SplitTf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = __float_as_uint(x) & 0xffffe000u;
  lo = __float_as_uint(x - __uint_as_float(hi)) + 0x1000u;
}

// SplitTf32 without the rounding of lo: the tensor cores truncate it, so its
// error is < 2^-20 |x| instead of 2^-21 |x|, still below what summing a
// dot product in f32 adds. Two instructions per element: k-means' hot loops
// split every element of X twice, and the saved add made the cluster step
// ~3.5% faster at d = 4096 on an H100.
__device__ __forceinline__ void SplitTf32Trunc(float x, uint32_t& hi, uint32_t& lo) {
  hi = __float_as_uint(x) & 0xffffe000u;
  lo = __float_as_uint(x - __uint_as_float(hi));
}

// d += a * b, m16n8k8, TF32 inputs, f32 accumulators (PTX fragment layouts).
__device__ __forceinline__ void MmaTf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // launchers check the device first
#endif
}

}  // namespace tsm2
