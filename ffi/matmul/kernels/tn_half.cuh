// TSM2T for bf16 and f16 on their tensor cores: C[m, n] = A^T @ B for
// output tiles of 1024+ entries (TUsesMma in split_plan.h). The CUDA-core
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
//
// Rows that are not whole 16-byte vectors are staged as the vectors that
// cover them (tn.cuh LoadTCover), each row at its own offset within its
// stage row; ldmatrix needs 16-byte aligned rows, so each lane then gathers
// its fragments from there, two 2-byte loads per register. The offset of a
// row repeats every 8 rows (8 rows of any number of 2-byte elements are a
// whole number of vectors) and stages start on multiples of 16 rows, so a
// lane needs the offsets of two rows only, worked out once.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ffi/common/half_mma.cuh"
#include "ffi/matmul/kernels/tn.cuh"

namespace tsm2 {

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
  InitSums(acc, p.k);
  // One stage's MMAs, with each fragment built by load_a(stage, r, i, fa) and
  // load_b(stage, r, j, fb) for 16-row step r.
  auto stages = [&](auto load_a, auto load_b) {
    for (int64_t it = 0; it < blk.steps; ++it) {
      const T* stage = blk.Stage(p, it);
      // Rows past the split's end were zero-filled, so whole 16-row steps are safe.
      float part[RW][CW][4];
      InitSums(part, p.k);
#pragma unroll
      for (int r = 0; r < kStep; r += 16) {
        uint32_t fa[RW][4], fb[CW][2];
#pragma unroll
        for (int i = 0; i < RW; ++i) load_a(stage, r, i, fa[i]);
#pragma unroll
        for (int j = 0; j < CW; ++j) load_b(stage, r, j, fb[j]);
#pragma unroll
        for (int i = 0; i < RW; ++i) {
#pragma unroll
          for (int j = 0; j < CW; ++j) MmaHalf<T>(part[i][j], fa[i], fb[j]);
        }
      }
      AddTiles(acc, part);
    }
  };
  if (p.vec_ok) {
    stages([&](const T* st, int r, int i,
               uint32_t (&f)[4]) { LdMatrixX4Trans(st + a_off + r * kLda + 16 * i, f); },
           [&](const T* st, int r, int j, uint32_t (&f)[2]) {
             LdMatrixX2Trans(st + b_off + r * kLdb + 8 * j, f);
           });
  } else {
    // Lane (g, t) holds A^T's (M g and g + 8, K 2t, 2t + 1 and those + 8) and
    // B's (K the same, N g): rows 2t and 2t + 1 of each 16, at their offsets.
    const int64_t r_lo = blk.r_begin + 2 * blk.t;
    const int a0 = 2 * blk.t * kLda + CoverOffset(blk.a, p.m, blk.p0, r_lo) + blk.row0 + blk.g;
    const int a1 =
        (2 * blk.t + 1) * kLda + CoverOffset(blk.a, p.m, blk.p0, r_lo + 1) + blk.row0 + blk.g;
    const int b0 =
        kStep * kLda + 2 * blk.t * kLdb + CoverOffset(blk.b, p.n, blk.q0, r_lo) + blk.col0 + blk.g;
    const int b1 = kStep * kLda + (2 * blk.t + 1) * kLdb +
                   CoverOffset(blk.b, p.n, blk.q0, r_lo + 1) + blk.col0 + blk.g;
    auto pair = [](const T* st, int lo, int hi) {
      const auto* h = reinterpret_cast<const unsigned short*>(st);
      return static_cast<uint32_t>(h[lo]) | (static_cast<uint32_t>(h[hi]) << 16);
    };
    stages(
        [&](const T* st, int r, int i, uint32_t (&f)[4]) {
          const int d = r * kLda + 16 * i;
          f[0] = pair(st, a0 + d, a1 + d);
          f[1] = pair(st, a0 + d + 8, a1 + d + 8);
          f[2] = pair(st, a0 + d + 8 * kLda, a1 + d + 8 * kLda);
          f[3] = pair(st, a0 + d + 8 * kLda + 8, a1 + d + 8 * kLda + 8);
        },
        [&](const T* st, int r, int j, uint32_t (&f)[2]) {
          const int d = r * kLdb + 8 * j;
          f[0] = pair(st, b0 + d, b1 + d);
          f[1] = pair(st, b0 + d + 8 * kLdb, b1 + d + 8 * kLdb);
        });
  }
  blk.Drain();
  blk.ForEachM16Out(p, acc, [&](float v, int64_t row, int64_t col) {
    StoreSplitOut<T>(p, blk.split, row, col, v);
  });
}

}  // namespace tsm2
