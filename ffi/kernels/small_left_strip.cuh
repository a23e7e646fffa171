// TSM2S in strips, for bf16 and f16: C[m, n] = A[m, k] @ B[k, n], m <= 16,
// where 128-column tiles would leave the GPU idle without many splits (S
// bf16 m x 4096 x 4096: 32 tiles, so 16 splits, a pass of partial sums and a
// second kernel, which kept it at 15-27 us against ~11 us of reading B).
//
// A block owns a strip of kStripCols columns and, by default, the whole
// contraction: its kStripWarps warps each take an equal share of the rows
// through a cp.async ring of their own (no block barrier until the end) and
// are added in shared memory in a fixed order. 4096 columns make 128 strips,
// one wave of one block per SM. The time still grows with m (kernel lab,
// 4096 x 4096: 12.4 us at m = 1, 15.8 at 16): every strip reads all of A
// from L2, 16 MB at m = 16 beside B's 33.5.
//
// The product is mma.sync m16n8k16 for every m (A's rows padded to 16 with
// zeros): the tensor cores have time to spare here, and the CUDA-core kernel
// spends m FMAs per element of B. A stage's k16 steps (kStripRows / 16 of
// them) chain from zero and are added to the running f32 sum, as in
// tn_half.cuh, so the tensor cores' truncating adder never sees a whole
// warp's rows. A stage holds B row by row (ldmatrix
// .trans gives the column-major operand) and A row by row (ldmatrix gives
// the row-major one); kTMmaPad makes both row strides odd multiples of 16
// bytes, so the 8 rows of each 8 x 8 matrix hit distinct banks.
#pragma once

#include <cstdint>

#include "ffi/kernels/split_reduce.cuh"
#include "ffi/kernels/tn_half.cuh"
#include "ffi/split_plans.h"

namespace tsm2 {

template <typename T>
struct StripSmem {
  static constexpr int kLdb = kStripCols + kTMmaPad;  // B rows: [kStripRows][kLdb]
  static constexpr int kLda = kStripRows + kTMmaPad;  // A rows: [16][kLda]
  static constexpr int kBElems = kStripRows * kLdb;
  static constexpr int kStageElems = kBElems + 16 * kLda;
  static constexpr int kWarpElems = kStripStages * kStageElems;
  static constexpr int kBytes = kStripWarps * kWarpElems * static_cast<int>(sizeof(T));
  static_assert(kStripRows % 16 == 0 && kStripCols == 32, "k16 steps of four n8 MMAs");
  static_assert(kLda * sizeof(T) % 16 == 0, "A's rows are whole 16-byte vectors");
  static_assert(kStripWarps * 16 * kStripCols * 4 <= kBytes, "the warps' sums fit in the ring");
};

// Queues a warp's copy of B rows [r0, r0 + kStripRows) of the strip and
// A[:m, r0:r0 + kStripRows] into a stage. Rows past r_end, columns past n and
// A's rows past m are zeros (A's were zeroed once, at the start). vec_ok:
// 16-byte chunks through cp.async; else element by element through registers.
template <typename T>
__device__ __forceinline__ void LoadStripStage(const SplitArgs& p, const T* a, const T* b,
                                               int64_t col0, int64_t r0, int64_t r_end, T* stage) {
  using Sm = StripSmem<T>;
  constexpr int kRowChunks = kStripCols / 8, kAChunks = kStripRows / 8;
  const int lane = threadIdx.x % 32;
  if (p.vec_ok) {
    // Lane l copies chunk l % 4 of rows l / 4, l / 4 + 8, ...
    static_assert(kRowChunks == 4, "four chunks per row");
    const int j = (lane % kRowChunks) * 8;
    const bool col_ok = col0 + j < p.n;
    const T* src = b + (r0 + lane / kRowChunks) * p.n + col0 + j;
#pragma unroll
    for (int u = 0; u < kStripRows / 8; ++u) {
      const int r = lane / kRowChunks + 8 * u;
      const bool valid = col_ok && r0 + r < r_end;
      CpAsync16(stage + r * Sm::kLdb + j, valid ? src + 8 * u * p.n : b, valid);
    }
#pragma unroll
    for (int c = lane; c < 16 * kAChunks; c += 32) {
      const int i = c / kAChunks, j = (c % kAChunks) * 8;
      if (i < p.m) {
        const bool valid = r0 + j < r_end;
        CpAsync16(stage + Sm::kBElems + i * Sm::kLda + j, valid ? a + i * p.k + r0 + j : a, valid);
      }
    }
  } else {
    for (int e = lane; e < kStripRows * kStripCols; e += 32) {
      const int r = e / kStripCols, j = e % kStripCols;
      const bool valid = r0 + r < r_end && col0 + j < p.n;
      stage[r * Sm::kLdb + j] = valid ? b[(r0 + r) * p.n + col0 + j] : T(0.0f);
    }
    for (int e = lane; e < p.m * kStripRows; e += 32) {
      const int i = e / kStripRows, j = e % kStripRows;
      stage[Sm::kBElems + i * Sm::kLda + j] = r0 + j < r_end ? a[i * p.k + r0 + j] : T(0.0f);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kStripWarps * 32, kStripBlocksPerSm)
    Tsm2SStripKernel(const __grid_constant__ SplitArgs p) {
  using Sm = StripSmem<T>;
  extern __shared__ __align__(16) char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T* ring = reinterpret_cast<T*>(smem) + warp * Sm::kWarpElems;

  const SplitBlock blk = DecodeSplitBlock(p);
  const int64_t col0 = blk.tile_n * p.tile_n;
  const int64_t split_begin = blk.split * p.split_len;
  const int64_t split_end = min(p.k, split_begin + p.split_len);
  // split_len is a multiple of kStripWarps * kStripRows, so warps' ranges are whole stages.
  const int64_t warp_len = p.split_len / kStripWarps;
  const int64_t r_begin = split_begin + warp * warp_len;
  const int64_t r_end = min(split_end, r_begin + warp_len);
  const int64_t steps = r_end > r_begin ? (r_end - r_begin + kStripRows - 1) / kStripRows : 0;
  const T* a = static_cast<const T*>(p.a) + blk.batch * p.a_batch_stride;
  const T* b = static_cast<const T*>(p.b) + blk.batch * p.b_batch_stride;

  // A's rows m..15 stay zero in every stage: the copies never touch them.
  // (Element by element, this took ~5 us at m = 1 in the kernel lab.)
  constexpr int kARowVecs = Sm::kLda * static_cast<int>(sizeof(T)) / 16;
#pragma unroll
  for (int s = 0; s < kStripStages; ++s) {
    uint4* rows = reinterpret_cast<uint4*>(ring + s * Sm::kStageElems + Sm::kBElems);
    for (int v = p.m * kARowVecs + lane; v < 16 * kARowVecs; v += 32)
      rows[v] = make_uint4(0, 0, 0, 0);
  }

  GridDependencyWait();  // nothing above touched global memory
#pragma unroll
  for (int s = 0; s < kStripStages - 1; ++s) {
    if (s < steps) {
      LoadStripStage<T>(p, a, b, col0, r_begin + s * kStripRows, r_end, ring + s * Sm::kStageElems);
    }
    CpAsyncCommit();
  }

  // ldmatrix addresses: A's four matrices are (rows 0-7, k 0-7), (8-15, 0-7),
  // (0-7, 8-15), (8-15, 8-15); B's are (k 0-7, n 0-7), (k 8-15, n 0-7) and
  // the same for n 8-15, once per 16 columns.
  const int a_off = Sm::kBElems + (lane % 8 + 8 * (lane / 8 % 2)) * Sm::kLda + 8 * (lane / 16);
  const int b_off = (lane % 8 + 8 * (lane / 8 % 2)) * Sm::kLdb + 8 * (lane / 16);

  float acc[4][4] = {};
  for (int64_t it = 0; it < steps; ++it) {
    CpAsyncWait<kStripStages - 2>();
    __syncwarp();  // stage `it` has landed for every lane; stage it-1 is free
    const int64_t ip = it + kStripStages - 1;
    if (ip < steps) {
      LoadStripStage<T>(p, a, b, col0, r_begin + ip * kStripRows, r_end,
                        ring + (ip % kStripStages) * Sm::kStageElems);
    }
    CpAsyncCommit();

    // The stage's k16 steps chain from zero in `part` (as small_left_mma.cuh).
    const T* st = ring + (it % kStripStages) * Sm::kStageElems;
    float part[4][4] = {};
#pragma unroll
    for (int r = 0; r < kStripRows; r += 16) {
      uint32_t fa[4], fb[2][4];
      LdMatrixX4(st + a_off + r, fa);
#pragma unroll
      for (int h = 0; h < 2; ++h) LdMatrixX4Trans(st + b_off + r * Sm::kLdb + 16 * h, fb[h]);
#pragma unroll
      for (int f = 0; f < 4; ++f) {
        const uint32_t frag[2] = {fb[f / 2][2 * (f % 2)], fb[f / 2][2 * (f % 2) + 1]};
        MmaHalf<T>(part[f], fa, frag);
      }
    }
#pragma unroll
    for (int f = 0; f < 4; ++f) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[f][e] += part[f][e];
    }
  }
  CpAsyncWait<0>();
  __syncthreads();  // every warp is done with its ring: it now holds the warps' sums

  // m16n8 accumulators: lane holds rows lane / 4 and lane / 4 + 8, columns
  // 2 (lane % 4) and the next, of each 8-column fragment.
  float* sums = reinterpret_cast<float*>(smem);  // [warp][16][kStripCols]
#pragma unroll
  for (int f = 0; f < 4; ++f) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = lane / 4 + 8 * (e / 2), j = 8 * f + 2 * (lane % 4) + e % 2;
      sums[(warp * 16 + i) * kStripCols + j] = acc[f][e];
    }
  }
  __syncthreads();
  for (int o = threadIdx.x; o < 16 * kStripCols; o += kStripWarps * 32) {
    const int i = o / kStripCols, j = o % kStripCols;
    if (i >= p.m || col0 + j >= p.n) continue;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kStripWarps; ++w) v += sums[w * 16 * kStripCols + o];
    StoreSplitOut<T>(p, blk, i, col0 + j, v);
  }
}

}  // namespace tsm2
