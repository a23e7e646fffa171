// TSM2T for f32 on TF32 tensor cores, with f32 accuracy: C[m, n] = A^T @ B
// for output tiles of 2048+ entries with both edges >= 16 (TUsesMma in
// split_plan.h). There the CUDA-core kernel (tn.cuh) is bound by the FMA
// pipes: a 64 x 64 tile needs 4096 FMAs per contraction row, 32 cycles of an
// SM's 128 lanes against ~39 cycles for the row's 512 bytes at the read
// ceiling, and it reached 50% of the ceiling.
//
// Same split plan, ring and fixed-order split reduction as tn.cuh and
// tn_mma.cuh; only the inner product differs. The contraction runs 8 rows at
// a time through mma.sync m16n8k8 with every operand split as hi + lo
// (tf32.cuh): hi*hi in one accumulator, hi*lo + lo*hi in another. The tensor
// cores truncate when they add into an accumulator, so each stage's hi*hi
// chain starts from zero and is added to the running sum with an f32 add
// (rounded to nearest): a chain is step / 8 MMAs long, not the whole split.
// The small cross terms keep one accumulator for the split.
//
// The output tile is cut into 16 x 8 MMA tiles, RW x CW of them per warp
// (8 warps cover the tile, TMmaTile in tn.cuh). Lane (g, t) = (lane / 4, lane % 4) reads
// A^T[row g (+8)][k t (+4)] = stage A[k][row] and B[k t (+4)][col g]:
// stage rows padded by kTMmaPad floats put the four k of a fragment on
// distinct banks.
//
// Non-finite inputs: Inf splits into hi = Inf, lo = NaN, and hi * lo of a
// zero would also be NaN where IEEE arithmetic gives Inf. Any NaN or Inf in
// a block's slices leaves a NaN in its cross-term accumulators, so a block
// that finds one recomputes its tile of the split with plain f32 FMAs from
// global memory (slow, and only there).
#pragma once

#include <cstdint>

#include "ffi/common/tf32.cuh"
#include "ffi/matmul/kernels/tn.cuh"

namespace tsm2 {

template <int TM, int TN>
__global__ void __launch_bounds__(kTThreads, 2)
    Tsm2TTf32Kernel(const __grid_constant__ SplitArgs p) {
  using Tile = TMmaTile<float, TM, TN>;
  constexpr int RW = Tile::kRW, CW = Tile::kCW, kLda = Tile::kLda, kLdb = Tile::kLdb;
  constexpr int kStep = Tile::kStep;
  extern __shared__ __align__(16) char smem[];
  TMmaBlock<float, TM, TN> blk(p, reinterpret_cast<float*>(smem));
  const int g = blk.g, t = blk.t;
  // Rows staged at their offsets (tn.cuh LoadTCover): this lane reads rows t and
  // t + 4 of every 8, and a row's offset repeats every 4 rows (4 rows of 4-byte
  // elements are whole vectors), so one offset per operand serves all of them.
  const int a_at = blk.row0 + g + (p.vec_ok ? 0 : CoverOffset(blk.a, p.m, blk.p0, blk.r_begin + t));
  const int b_at = blk.col0 + g + (p.vec_ok ? 0 : CoverOffset(blk.b, p.n, blk.q0, blk.r_begin + t));

  float acc[RW][CW][4];    // hi*hi, added stage by stage
  float cross[RW][CW][4];  // hi*lo + lo*hi
  InitSums(acc, p.k);
  InitSums(cross, p.k);
  for (int64_t it = 0; it < blk.steps; ++it) {
    const float* stage = blk.Stage(p, it);
    // Rows past the split's end were zero-filled, so whole 8-row steps are safe.
    const float* sa = stage + t * kLda + a_at;
    const float* sb = stage + kStep * kLda + t * kLdb + b_at;
    float part[RW][CW][4];
    InitSums(part, p.k);
#pragma unroll
    for (int r = 0; r < kStep; r += 8) {
      uint32_t ah[RW][4], al[RW][4], bh[CW][2], bl[CW][2];
#pragma unroll
      for (int i = 0; i < RW; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {  // a0..a3: (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)
          SplitTf32(sa[(r + 4 * (e / 2)) * kLda + 16 * i + 8 * (e % 2)], ah[i][e], al[i][e]);
        }
      }
#pragma unroll
      for (int j = 0; j < CW; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) SplitTf32(sb[(r + 4 * e) * kLdb + 8 * j], bh[j][e], bl[j][e]);
      }
      // Three passes over the tiles, so that the two MMAs into one cross
      // accumulator are 2 RW CW MMAs apart instead of back to back.
#pragma unroll
      for (int i = 0; i < RW; ++i) {
#pragma unroll
        for (int j = 0; j < CW; ++j) MmaTf32(cross[i][j], al[i], bh[j][0], bh[j][1]);
      }
#pragma unroll
      for (int i = 0; i < RW; ++i) {
#pragma unroll
        for (int j = 0; j < CW; ++j) MmaTf32(part[i][j], ah[i], bh[j][0], bh[j][1]);
      }
#pragma unroll
      for (int i = 0; i < RW; ++i) {
#pragma unroll
        for (int j = 0; j < CW; ++j) MmaTf32(cross[i][j], ah[i], bl[j][0], bl[j][1]);
      }
    }
    AddTiles(acc, part);
  }
  blk.Drain();

  bool poisoned = false;
#pragma unroll
  for (int i = 0; i < RW; ++i) {
#pragma unroll
    for (int j = 0; j < CW; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) poisoned |= isnan(cross[i][j][e]);
    }
  }
  const bool exact = __syncthreads_or(poisoned);

#pragma unroll
  for (int i = 0; i < RW; ++i) {
#pragma unroll
    for (int j = 0; j < CW; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] += cross[i][j][e];
    }
  }
  blk.ForEachM16Out(p, acc, [&](float v, int64_t row, int64_t col) {
    if (exact) {  // IEEE semantics for NaN and Inf: plain FMAs over the split
      InitSums(v, p.k);
      for (int64_t r = blk.r_begin; r < blk.r_end; ++r) {
        v = fmaf(blk.a[r * p.m + row], blk.b[r * p.n + col], v);
      }
    }
    StoreSplitOut<float>(p, blk.split, row, col, v);
  });
}

}  // namespace tsm2
