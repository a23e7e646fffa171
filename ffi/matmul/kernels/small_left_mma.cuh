// TSM2S for bf16 and f16 on their tensor cores: C[m, n] = A[m, k] @ B[k, n]
// with m <= 16. The CUDA-core kernel (small_left.cuh) widens every element of
// B and spends m FMAs on it; past m = 4 that, not the reads, set its time
// (S bf16 m x 4096 x 4096 in the kernel lab: 15 us at m = 1, 27 at 8, 40 at
// 16, against ~11 us of reading B).
//
// Same split plan, B ring (LoadSBStage) and split sums as the CUDA-core
// kernel; the product is mma.sync m16n8k16 with A's rows padded to 16 (zeros)
// and f32 accumulators. Products of two bf16 (or f16) values are exact in
// f32; the tensor cores truncate when they add into an accumulator, so each
// stage's two MMAs start from zero and are added to the running sum with an
// f32 add, as in tn_half.cuh. Each warp owns 16 of the block's 128 columns
// for every row of a stage, so no warps are added at the end.
//
// A stage holds B row by row (kLdb apart) and A transposed (A^T[r][i], kLda
// apart, i >= m zero): ldmatrix.trans reads both, as in tn_half.cuh, and the
// kTMmaPad padding makes both row strides odd multiples of 16 bytes. Rows of B
// copied in windows (small_left.cuh) start anywhere in their slot's first
// vector, where ldmatrix cannot read them: lanes then gather B's fragments
// element by element.
#pragma once

#include <cstdint>

#include "ffi/common/half_mma.cuh"
#include "ffi/matmul/kernels/small_left.cuh"

namespace tsm2 {

template <typename T, typename Tune = STuning>
struct SMmaSmem {
  static constexpr int kCols = SCols<T>::kTileCols;  // 128
  static constexpr int kLdb = kCols + kTMmaPad, kLda = 16 + kTMmaPad;
  static constexpr int kBElems = kSRowsPerStep * kLdb;
  static constexpr int kStageElems = kBElems + kSRowsPerStep * kLda;
  static constexpr int kStageBytes = kStageElems * static_cast<int>(sizeof(T));
  static constexpr int kBytes = Tune::kStages * kStageBytes;
  static constexpr int kAPerThread = kSRowsPerStep * 16 / kSThreads;
  static_assert(kCols == 8 * 16, "8 warps of 16 columns");
  static_assert(kLdb >= SCols<T>::kLd, "a B row's slot holds its window");
  static_assert(kSRowsPerStep % 16 == 0 && kSRowsPerStep * 16 % kSThreads == 0, "whole steps");
};

// A^T[r][i] = A[i, r0 + r] for the rows of a stage (zero past m and r_end),
// read into registers one stage ahead and stored after the stage's MMAs.
template <typename T>
__device__ __forceinline__ void LoadSMmaA(const SplitArgs& p, const T* a, int64_t r0, int64_t r_end,
                                          T (&regs)[SMmaSmem<T>::kAPerThread]) {
#pragma unroll
  for (int q = 0; q < SMmaSmem<T>::kAPerThread; ++q) {
    const int e = threadIdx.x + q * kSThreads;  // e = r * 16 + i
    const int r = e / 16, i = e % 16;
    regs[q] = i < p.m && r0 + r < r_end ? a[i * p.k + r0 + r] : T(-0.0f);
  }
}
template <typename T>
__device__ __forceinline__ void StoreSMmaA(const T (&regs)[SMmaSmem<T>::kAPerThread], T* stage) {
  T* dst = stage + SMmaSmem<T>::kBElems;
#pragma unroll
  for (int q = 0; q < SMmaSmem<T>::kAPerThread; ++q) {
    const int e = threadIdx.x + q * kSThreads;
    dst[(e / 16) * SMmaSmem<T>::kLda + e % 16] = regs[q];
  }
}

// B's m16n8k16 fragment for the 16 rows from `r` (stage row r0 + r) and the 8
// columns from `col` of a stage whose rows are windows: what ldmatrix.trans
// gives, rows 2 (lane % 4) and the next (and 8 more) of column lane / 4.
template <typename T, int kLdb>
__device__ __forceinline__ void GatherSMmaB(const T* st, const SRowShift<T>& shift, int64_t r0,
                                            int r, int col, uint32_t (&fb)[2]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int k = r + 2 * (lane % 4) + 8 * h;
    const auto lo =
        reinterpret_cast<const uint16_t*>(st)[k * kLdb + shift(r0 + k) + col + lane / 4];
    const auto hi =
        reinterpret_cast<const uint16_t*>(st)[(k + 1) * kLdb + shift(r0 + k + 1) + col + lane / 4];
    fb[h] = uint32_t{lo} | uint32_t{hi} << 16;
  }
}

// Tune::kBlocksPerSm resident blocks, as the plan assumes: 64 registers, no
// spills (ptxas -v; 111 without the bound, which left room for two).
template <typename T, typename Tune>
__global__ void __launch_bounds__(kSThreads, Tune::kBlocksPerSm)
    Tsm2SMmaKernel(const __grid_constant__ SplitArgs p) {
  using Sm = SMmaSmem<T, Tune>;
  constexpr int kStages = Tune::kStages;
  constexpr int kLda = Sm::kLda, kLdb = Sm::kLdb;
  extern __shared__ __align__(16) char smem[];
  T* ring = reinterpret_cast<T*>(smem);

  const SplitBlock blk = DecodeSplitBlock(p);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t col0 = blk.tile_n * p.tile_n;
  const int64_t r_begin = blk.split * p.split_len;
  const int64_t r_end = min(p.k, r_begin + p.split_len);
  const T* a = static_cast<const T*>(p.a) + blk.batch * p.a_batch_stride;
  const T* b = static_cast<const T*>(p.b) + blk.batch * p.b_batch_stride;
  const int64_t steps = (r_end - r_begin + kSRowsPerStep - 1) / kSRowsPerStep;
  const SRowShift<T> shift(p, b, col0);

  // The row and column this lane addresses for ldmatrix (tn_half.cuh): A's
  // four matrices are (M 0-7, K 0-7), (M 8-15, K 0-7), (M 0-7, K 8-15),
  // (M 8-15, K 8-15); B's two are (K 0-7) and (K 8-15) of 8 columns.
  const int a_off = Sm::kBElems + (lane % 8 + 8 * (lane / 16)) * kLda + 8 * (lane / 8 % 2);
  const int b_off = (lane % 8 + 8 * (lane / 8 % 2)) * kLdb + 16 * warp;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) {
      T* st = ring + s * Sm::kStageElems;
      LoadSBStage<T, kLdb>(p, b, col0, r_begin + s * kSRowsPerStep, r_end,
                           reinterpret_cast<char*>(st));
      T regs[Sm::kAPerThread];
      LoadSMmaA<T>(p, a, r_begin + s * kSRowsPerStep, r_end, regs);
      StoreSMmaA<T>(regs, st);
    }
    CpAsyncCommit();
  }

  float acc[2][4];
  InitSums(acc, p.k);
  for (int64_t it = 0; it < steps; ++it) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // stage `it` has landed everywhere; stage it-1 is free
    const int64_t ip = it + kStages - 1;
    T* next = ring + (ip % kStages) * Sm::kStageElems;
    T a_next[Sm::kAPerThread];
    if (ip < steps) {
      LoadSBStage<T, kLdb>(p, b, col0, r_begin + ip * kSRowsPerStep, r_end,
                           reinterpret_cast<char*>(next));
      LoadSMmaA<T>(p, a, r_begin + ip * kSRowsPerStep, r_end, a_next);
    }
    CpAsyncCommit();

    // Rows past the split's end were zero-filled, so whole 16-row steps are safe.
    const T* st = ring + (it % kStages) * Sm::kStageElems;
    float part[2][4];
    InitSums(part, p.k);
    const int64_t r0 = r_begin + it * kSRowsPerStep;
#pragma unroll
    for (int r = 0; r < kSRowsPerStep; r += 16) {
      uint32_t fa[4], fb[2][2];
      LdMatrixX4Trans(st + a_off + r * kLda, fa);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (p.b_window) {
          GatherSMmaB<T, kLdb>(st, shift, r0, r, 16 * warp + 8 * j, fb[j]);
        } else {
          LdMatrixX2Trans(st + b_off + r * kLdb + 8 * j, fb[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) MmaHalf<T>(part[j], fa, fb[j]);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] += part[j][e];
    }
    if (ip < steps) StoreSMmaA<T>(a_next, next);
  }
  CpAsyncWait<0>();

  // m16n8 accumulators: lane holds rows lane / 4 and lane / 4 + 8, columns
  // 2 (lane % 4) and the next, of each 8-column fragment.
#pragma unroll
  for (int j = 0; j < 2; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t i = lane / 4 + 8 * (e / 2);
      const int64_t col = col0 + 16 * warp + 8 * j + 2 * (lane % 4) + e % 2;
      if (i < p.m && col < p.n) StoreSplitOut<T>(p, blk, i, col, acc[j][e]);
    }
  }
}

}  // namespace tsm2
