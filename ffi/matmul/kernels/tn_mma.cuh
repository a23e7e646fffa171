// TSM2T on FP64 tensor cores: C[m, n] = A^T @ B for f64 output tiles of
// 2048+ entries (TUsesMma in split_plan.h), where the CUDA-core kernel
// (tn.cuh) is bound by the FP64 FMA pipes: a 64 x 64 tile costs 4096 FMAs per
// contraction row, 64 cycles of an SM's 64 FP64 lanes against ~89 cycles for
// the row's 1 KB at the read ceiling, before any other instruction.
//
// Same split plan, ring and fixed-order split reduction as tn.cuh; only the
// inner product differs. The contraction runs 4 rows at a time through
// mma.sync m8n8k4 (DMMA: 256 FMAs per warp instruction, twice the FP64 FMA
// rate, exact IEEE products and sums). The output tile is cut into 8 x 8 MMA
// tiles, RW x CW of them per warp (8 warps cover the tile, TMmaTile in tn.cuh). For each MMA,
// lane (r, q) = (lane / 4, lane % 4) supplies A^T[r][q] = A[row q][col r] and
// B[row q][col r] straight from the stage, which is why stage rows are padded
// (kTMmaPad): without it the four rows of a fragment sit on the same banks.
#pragma once

#include <cstdint>

#include "ffi/matmul/kernels/tn.cuh"

namespace tsm2 {

// c (8 x 8, two entries per lane) += a^T b over 4 contraction rows; `a` and
// `b` point at the lane's own fragment element.
__device__ __forceinline__ void Dmma8x8x4(double a, double b, double (&c)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
               : "+d"(c[0]), "+d"(c[1])
               : "d"(a), "d"(b));
#else
  __trap();  // TUsesMma plans never launch below sm_80 (LaunchT checks the device)
#endif
}

template <int TM, int TN>
__global__ void __launch_bounds__(kTThreads, 2)
    Tsm2TMmaKernel(const __grid_constant__ SplitArgs p) {
  using Tile = TMmaTile<double, TM, TN>;
  constexpr int RW = Tile::kRW, CW = Tile::kCW, kLda = Tile::kLda, kLdb = Tile::kLdb;
  constexpr int kStep = Tile::kStep;
  extern __shared__ __align__(16) char smem[];
  TMmaBlock<double, TM, TN> blk(p, reinterpret_cast<double*>(smem));
  const int fr = blk.g, fq = blk.t;  // lane (r, q) of the m8n8k4 fragments

  double acc[RW][CW][2];
  InitSums(acc, p.k);
  for (int64_t it = 0; it < blk.steps; ++it) {
    const double* stage = blk.Stage(p, it);
    // Rows past the split's end were zero-filled, so whole 4-row steps are safe.
    const double* sa = stage + fq * kLda + blk.row0 + fr;
    const double* sb = stage + kStep * kLda + fq * kLdb + blk.col0 + fr;
#pragma unroll
    for (int r = 0; r < kStep; r += 4) {
      double fa[RW], fb[CW];
#pragma unroll
      for (int i = 0; i < RW; ++i) fa[i] = sa[r * kLda + 8 * i];
#pragma unroll
      for (int j = 0; j < CW; ++j) fb[j] = sb[r * kLdb + 8 * j];
#pragma unroll
      for (int i = 0; i < RW; ++i) {
#pragma unroll
        for (int j = 0; j < CW; ++j) Dmma8x8x4(fa[i], fb[j], acc[i][j]);
      }
    }
  }
  blk.Drain();

  // Lane (r, q) holds entries (r, 2q) and (r, 2q + 1) of each MMA tile.
#pragma unroll
  for (int i = 0; i < RW; ++i) {
    const int64_t row = blk.p0 + blk.row0 + 8 * i + fr;
#pragma unroll
    for (int j = 0; j < CW; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t col = blk.q0 + blk.col0 + 8 * j + 2 * fq + e;
        if (row < p.m && col < p.n) StoreSplitOut<double>(p, blk.split, row, col, acc[i][j][e]);
      }
    }
  }
}

}  // namespace tsm2
