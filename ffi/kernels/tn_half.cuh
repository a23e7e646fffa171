// TSM2T for bf16 and f16 on their tensor cores: C[m, n] = A^T @ B for
// output tiles of 1024+ entries (TUsesMma in split_plans.h). The CUDA-core
// kernel (tn.cuh) widens every element to f32 and spends one FMA per output
// per contraction row; at half the bytes per element that is twice the FMAs
// per byte of an f32 tile, and a 512 x 8 bf16 tile (the gradient A^T G of a
// product with 8 columns) could not keep up with the reads.
//
// Same split plan, ring and fixed-order split reduction as tn.cuh; only the
// inner product differs. The contraction runs 16 rows at a time through
// mma.sync m16n8k16 with f32 accumulators: products of two bf16 (or f16)
// values are exact in f32, as in the CUDA-core kernel. The tensor cores
// truncate when they add into an accumulator, so each stage's chain starts
// from zero and is added to the running sum with an f32 add (rounded to
// nearest), as in tn_tf32.cuh.
//
// The stage holds A and B row by row (contraction rows, output columns
// contiguous), which is the transpose of the row-major MMA operand A^T and
// of the column-major operand B: ldmatrix.trans reads both from there, 8
// rows of 16 bytes per 8 x 8 matrix. Stage rows padded by kTMmaPad elements
// (16 bytes) make a row stride an odd multiple of 16 bytes for every tile
// edge that is a multiple of 16, so the 8 rows of a matrix hit distinct banks
// (the B slice of a tile 8 wide conflicts two ways: one load in five).
#pragma once

#include <cstdint>
#include <type_traits>

#include "ffi/kernels/tn.cuh"

namespace tsm2 {

// Four 8 x 8 matrices of 16-bit elements, transposed: lane l gives the
// address of row l % 8 of matrix l / 8 and gets two elements of each.
__device__ __forceinline__ void LdMatrixX4Trans(const void* row, uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#else
  __trap();  // TUsesMma plans never launch below sm_80 (LaunchT checks the device)
#endif
}
// The same four, not transposed (the row-major A operand, small_left_cluster.cuh).
__device__ __forceinline__ void LdMatrixX4(const void* row, uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#else
  __trap();
#endif
}
// Two of them (lanes 0-15 give the addresses).
__device__ __forceinline__ void LdMatrixX2Trans(const void* row, uint32_t (&r)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
#else
  __trap();
#endif
}

// d += a * b, m16n8k16, bf16 or f16 inputs, f32 accumulators.
template <typename T>
__device__ __forceinline__ void MmaHalf(float (&d)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#else
  __trap();
#endif
}

template <typename T, int TM, int TN>
__global__ void __launch_bounds__(kTThreads, 2)
    Tsm2THalfKernel(const __grid_constant__ SplitArgs p) {
  using Tile = TMmaTile<T, TM, TN>;
  constexpr int RW = Tile::kRW, CW = Tile::kCW, kLda = Tile::kLda, kLdb = Tile::kLdb;
  constexpr int kStep = Tile::kStep;
  static_assert(Tile::kMM == 16 && kStep % 16 == 0, "m16n8k16 steps");
  extern __shared__ __align__(16) char smem[];
  TMmaBlock<T, TM, TN> blk(p, reinterpret_cast<T*>(smem));
  const int lane = threadIdx.x % 32;

  // The row and column this lane addresses for ldmatrix. A fragment's four
  // matrices are (M 0-7, K 0-7), (M 8-15, K 0-7), (M 0-7, K 8-15),
  // (M 8-15, K 8-15); B's two are (K 0-7) and (K 8-15).
  const int a_off = (lane % 8 + 8 * (lane / 16)) * kLda + blk.row0 + 8 * (lane / 8 % 2);
  const int b_off = kStep * kLda + (lane % 8 + 8 * (lane / 8 % 2)) * kLdb + blk.col0;

  float acc[RW][CW][4];
  InitSums(acc);
  for (int64_t it = 0; it < blk.steps; ++it) {
    const T* stage = blk.Stage(p, it);
    // Rows past the split's end were zero-filled, so whole 16-row steps are safe.
    float part[RW][CW][4];
    InitSums(part);
#pragma unroll
    for (int r = 0; r < kStep; r += 16) {
      uint32_t fa[RW][4], fb[CW][2];
#pragma unroll
      for (int i = 0; i < RW; ++i) LdMatrixX4Trans(stage + a_off + r * kLda + 16 * i, fa[i]);
#pragma unroll
      for (int j = 0; j < CW; ++j) LdMatrixX2Trans(stage + b_off + r * kLdb + 8 * j, fb[j]);
#pragma unroll
      for (int i = 0; i < RW; ++i) {
#pragma unroll
        for (int j = 0; j < CW; ++j) MmaHalf<T>(part[i][j], fa[i], fb[j]);
      }
    }
    AddTiles(acc, part);
  }
  blk.Drain();
  blk.ForEachM16Out(p, acc, [&](float v, int64_t row, int64_t col) {
    StoreSplitOut<T>(p, blk.split, row, col, v);
  });
}

}  // namespace tsm2
