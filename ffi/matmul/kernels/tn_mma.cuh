// TSM2T on FP64 tensor cores: C[m, n] = A^T @ B for f64 output tiles of
// 2048+ entries (TUsesMma in split_plan.h), where the CUDA-core kernel
// (tn.cuh) is bound by the FP64 FMA pipes: a 64 x 64 tile costs 4096 FMAs per
// contraction row, 64 cycles of an SM's 64 FP64 lanes against ~89 cycles for
// the row's 1 KB at the read ceiling, before any other instruction.
//
// Same split plan, ring and fixed-order split reduction as tn.cuh; only the
// inner product differs. The contraction runs 4 rows at a time through
// 16-row DMMAs (f64_mma.cuh: exact IEEE products and sums). The output tile
// is cut into 16 x 8 MMA tiles, RW x CW of them per warp (8 warps cover the
// tile, TMmaTile in tn.cuh). For each MMA, lane (r, q) = (lane / 4, lane % 4)
// supplies A^T[r][q], A^T[r + 8][q] (A[row q][cols r, r + 8]) and B[row q][col
// r] straight from the stage, which is why stage rows are padded (kTMmaPad):
// without it the four rows of a fragment sit on the same banks.
#pragma once

#include <cstdint>

#include "ffi/common/f64_mma.cuh"
#include "ffi/matmul/kernels/tn.cuh"

namespace tsm2 {

template <int TM, int TN>
__global__ void __launch_bounds__(kTThreads, 2)
    Tsm2TMmaKernel(const __grid_constant__ SplitArgs p) {
  using Tile = TMmaTile<double, TM, TN>;
  constexpr int RW = Tile::kRW, CW = Tile::kCW, kLda = Tile::kLda, kLdb = Tile::kLdb;
  constexpr int kStep = Tile::kStep;
  extern __shared__ __align__(16) char smem[];
  TMmaBlock<double, TM, TN> blk(p, reinterpret_cast<double*>(smem));
  const int fr = blk.g, fq = blk.t;  // lane (r, q) of the fragments
  // Rows staged at their offsets (tn.cuh LoadTCover): this lane reads row fq of
  // every 4, and a row's offset repeats every 2 rows (2 rows of 8-byte elements
  // are whole vectors), so one offset per operand serves all of them.
  const int a_at =
      blk.row0 + fr + (p.vec_ok ? 0 : CoverOffset(blk.a, p.m, blk.p0, blk.r_begin + fq));
  const int b_at =
      blk.col0 + fr + (p.vec_ok ? 0 : CoverOffset(blk.b, p.n, blk.q0, blk.r_begin + fq));

  double acc[RW][CW][4];
  InitSums(acc, p.k);
  for (int64_t it = 0; it < blk.steps; ++it) {
    const double* stage = blk.Stage(p, it);
    // Rows past the split's end were zero-filled, so whole 4-row steps are safe.
    const double* sa = stage + fq * kLda + a_at;
    const double* sb = stage + kStep * kLda + fq * kLdb + b_at;
    // Two steps at a time: unrolled whole, the fragment loads hoisted ahead of the
    // DMMAs spilled at 64 x 64, 128 x 32 and 32 x 128 (128 registers at two blocks per SM).
#pragma unroll 2
    for (int r = 0; r < kStep; r += 4) {
      double fa[RW][2], fb[CW];
#pragma unroll
      for (int i = 0; i < RW; ++i) {
        fa[i][0] = sa[r * kLda + 16 * i];
        fa[i][1] = sa[r * kLda + 16 * i + 8];
      }
#pragma unroll
      for (int j = 0; j < CW; ++j) fb[j] = sb[r * kLdb + 8 * j];
#pragma unroll
      for (int i = 0; i < RW; ++i) {
#pragma unroll
        for (int j = 0; j < CW; ++j) MmaF64(acc[i][j], fa[i][0], fa[i][1], fb[j]);
      }
    }
  }
  blk.Drain();

  // Lane (r, q) holds entries (r, 2q), (r, 2q + 1), (r + 8, 2q) and (r + 8, 2q + 1) of each
  // MMA tile.
#pragma unroll
  for (int i = 0; i < RW; ++i) {
#pragma unroll
    for (int j = 0; j < CW; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = blk.p0 + blk.row0 + 16 * i + 8 * (e / 2) + fr;
        const int64_t col = blk.q0 + blk.col0 + 8 * j + 2 * fq + e % 2;
        if (row < p.m && col < p.n) StoreSplitOut<double>(p, blk.split, row, col, acc[i][j][e]);
      }
    }
  }
}

}  // namespace tsm2
