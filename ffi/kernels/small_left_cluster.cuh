// TSM2S over thread-block clusters, for bf16 and f16 on sm_90: C[m, n] =
// A[m, k] @ B[k, n], m <= 16.
//
// Why: a block of the strips this replaced owned 32 columns of B, so DRAM saw
// 64-byte pieces of each row, and every strip read all of A from the L2. Here
// a block owns kSClusterCols = 256 columns (512-byte runs of each row) and
// one kSClusterBlocks-th (8) of its split of the contraction; the 8 blocks of
// a column tile form a cluster and add their partial sums through
// distributed shared memory, in rank order (deterministic), with no
// workspace and no second kernel unless the plan also splits across
// clusters. 4096 x 4096 is 16 column tiles x 8 = 128 blocks, one wave.
// Kernel lab (benchmarks/s_cluster_lab.cu, bf16 m x 4096 x 4096, m = 1 / 16):
// 15.4 / 16.7 us against the strips' 16.9 / 19.1 and a read of B's 13.6.
//
// A stage is kSClusterRows rows of the block's 256 columns, with chunk c of
// row r stored at c ^ (r % 8) so that the 8 rows x 16 bytes of an
// ldmatrix.trans matrix fall in 8 distinct bank groups, and A's matching 16 x
// kSClusterRows slice (rows m..15 zero, rows padded to an odd number of
// 16-byte chunks). Warp w multiplies its 32 columns (4 n8 tiles) with
// mma.sync m16n8k16; each stage's k16 chain starts from zero and is added to
// the running f32 sum, as in the other half-precision kernels.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "ffi/kernels/split_reduce.cuh"
#include "ffi/kernels/tn_half.cuh"
#include "ffi/split_plans.h"

namespace tsm2 {

template <typename T>
struct ClusterSmem {
  static constexpr int kThreads = 256, kWarps = kThreads / 32;
  static constexpr int kCols = kSClusterCols, kRows = kSClusterRows;
  static constexpr int kLda = kRows + kTMmaPad;  // A rows: [16][kLda]
  static constexpr int kBElems = kRows * kCols;
  static constexpr int kStageElems = kBElems + 16 * kLda;
  static constexpr int kBytes = kSClusterStages * kStageElems * static_cast<int>(sizeof(T));
  static constexpr int kLdp = kCols + 8;  // row stride of the partial sums (floats)
  static constexpr int kRedCols = kCols / kSClusterBlocks;  // columns each rank adds up
  static_assert(kCols == 32 * kWarps && kRows % 16 == 0, "32 columns per warp, whole k16 steps");
  static_assert(kThreads % (kCols / 8) == 0 && kRows % (kThreads / (kCols / 8)) == 0,
                "whole rows per copy pass");
  static_assert(kLda * sizeof(T) % 32 == 16, "A's rows: an odd number of 16-byte chunks");
  static_assert(16 * kLdp * 4 <= kBytes, "the partial sums fit in the ring");
};

// Queues B rows [r0, r0 + kRows) of the block's columns and A[:m, r0:r0 +
// kRows] into a stage; rows past r_end and columns past n are zeros. vec_ok:
// 16-byte cp.async chunks; else element by element through registers.
template <typename T>
__device__ __forceinline__ void LoadClusterStage(const SplitArgs& p, const T* a, const T* b,
                                                 int64_t col0, int64_t r0, int64_t r_end,
                                                 T* stage) {
  using Sm = ClusterSmem<T>;
  constexpr int kChunks = Sm::kCols / 8, kPass = Sm::kThreads / kChunks;
  const int tid = threadIdx.x;
  if (p.vec_ok) {
    const int c = tid % kChunks, r = tid / kChunks;
    const bool col_ok = col0 + 8 * c < p.n;
    const T* src = b + (r0 + r) * p.n + col0 + 8 * c;
#pragma unroll
    for (int u = 0; u < Sm::kRows / kPass; ++u) {
      const int rr = r + u * kPass;
      const bool valid = col_ok && r0 + rr < r_end;
      CpAsync16(stage + rr * Sm::kCols + 8 * (c ^ (rr % 8)),
                valid ? src + static_cast<int64_t>(u) * kPass * p.n : b, valid);
    }
    constexpr int kAChunks = Sm::kRows / 8;
    if (tid < p.m * kAChunks) {
      const int i = tid / kAChunks, j = 8 * (tid % kAChunks);
      const bool valid = r0 + j < r_end;
      CpAsync16(stage + Sm::kBElems + i * Sm::kLda + j, valid ? a + i * p.k + r0 + j : a, valid);
    }
  } else {
    for (int e = tid; e < Sm::kRows * Sm::kCols; e += Sm::kThreads) {
      const int rr = e / Sm::kCols, j = e % Sm::kCols;
      const bool valid = r0 + rr < r_end && col0 + j < p.n;
      stage[rr * Sm::kCols + 8 * ((j / 8) ^ (rr % 8)) + j % 8] =
          valid ? b[(r0 + rr) * p.n + col0 + j] : T(0.0f);
    }
    for (int e = tid; e < p.m * Sm::kRows; e += Sm::kThreads) {
      const int i = e / Sm::kRows, j = e % Sm::kRows;
      stage[Sm::kBElems + i * Sm::kLda + j] = r0 + j < r_end ? a[i * p.k + r0 + j] : T(0.0f);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(ClusterSmem<T>::kThreads, 2)
    Tsm2SClusterKernel(const __grid_constant__ SplitArgs p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Sm = ClusterSmem<T>;
  constexpr int S = kSClusterStages;
  extern __shared__ __align__(16) char smem[];
  T* ring = reinterpret_cast<T*>(smem);
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  // Cluster u of the grid runs what block u of a strip-free plan would.
  const SplitBlock blk = DecodeSplitBlockAt(p, blockIdx.x / kSClusterBlocks);
  const int64_t col0 = blk.tile_n * p.tile_n;
  const int64_t split_begin = blk.split * p.split_len;
  const int64_t split_end = min(p.k, split_begin + p.split_len);
  // split_len is a multiple of kSClusterBlocks * kRows: ranks get whole stages.
  const int64_t rank_len = p.split_len / kSClusterBlocks;
  const int64_t r_begin = split_begin + rank * rank_len;
  const int64_t r_end = min(split_end, r_begin + rank_len);
  const int64_t steps = r_end > r_begin ? (r_end - r_begin + Sm::kRows - 1) / Sm::kRows : 0;
  const T* a = static_cast<const T*>(p.a) + blk.batch * p.a_batch_stride;
  const T* b = static_cast<const T*>(p.b) + blk.batch * p.b_batch_stride;

  // A's rows m..15 stay zero in every stage: the copies never touch them.
  constexpr int kARowVecs = Sm::kLda * static_cast<int>(sizeof(T)) / 16;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    uint4* rows = reinterpret_cast<uint4*>(ring + s * Sm::kStageElems + Sm::kBElems);
    for (int v = p.m * kARowVecs + tid; v < 16 * kARowVecs; v += Sm::kThreads)
      rows[v] = make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < steps) {
      LoadClusterStage<T>(p, a, b, col0, r_begin + s * Sm::kRows, r_end,
                          ring + s * Sm::kStageElems);
    }
    CpAsyncCommit();
  }

  // ldmatrix rows: lane l addresses row l % 8 of matrix l / 8. A's matrices
  // are (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15); B's, per
  // 16 columns h, (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15,
  // n 8-15). A k16 step starts at a multiple of 16 rows, so a lane's row % 8
  // is lane % 8 and its swizzled chunk is the same at every step.
  const int lrow = lane % 8 + 8 * (lane / 8 % 2), lhi = lane / 16;
  const int a_off = Sm::kBElems + lrow * Sm::kLda + 8 * lhi;
  int b_off[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    b_off[h] = lrow * Sm::kCols + 8 * ((4 * warp + 2 * h + lhi) ^ (lane % 8));

  float acc[4][4] = {};
  for (int64_t it = 0; it < steps; ++it) {
    CpAsyncWait<S - 2>();
    __syncthreads();  // stage `it` landed for every thread; stage it - 1 is free
    const int64_t ip = it + S - 1;
    if (ip < steps) {
      LoadClusterStage<T>(p, a, b, col0, r_begin + ip * Sm::kRows, r_end,
                          ring + (ip % S) * Sm::kStageElems);
    }
    CpAsyncCommit();

    const T* st = ring + (it % S) * Sm::kStageElems;
    float part[4][4] = {};
#pragma unroll
    for (int kr = 0; kr < Sm::kRows; kr += 16) {
      uint32_t fa[4], fb[2][4];
      LdMatrixX4(st + a_off + kr, fa);
#pragma unroll
      for (int h = 0; h < 2; ++h) LdMatrixX4Trans(st + kr * Sm::kCols + b_off[h], fb[h]);
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
  __syncthreads();  // every warp is done with the ring: it now takes the partial sums

  // m16n8 accumulators: lane holds rows lane / 4 and lane / 4 + 8, columns
  // 2 (lane % 4) and the next, of each n8 tile. Only the m real rows are kept.
  float* part_s = reinterpret_cast<float*>(smem);  // [16][kLdp]
#pragma unroll
  for (int f = 0; f < 4; ++f) {
    const int j = 32 * warp + 8 * f + 2 * (lane % 4);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int i = lane / 4 + 8 * hh;
      if (i < p.m) {
        *reinterpret_cast<float2*>(part_s + i * Sm::kLdp + j) =
            make_float2(acc[f][2 * hh], acc[f][2 * hh + 1]);
      }
    }
  }
  cluster.sync();  // every rank's partial sums are in its shared memory

  // Rank r adds up columns [r * kRedCols, (r + 1) * kRedCols) of the tile
  // over the ranks, in rank order.
  for (int e = tid; e < p.m * Sm::kRedCols; e += Sm::kThreads) {
    const int i = e / Sm::kRedCols, j = rank * Sm::kRedCols + e % Sm::kRedCols;
    float v[kSClusterBlocks];
#pragma unroll
    for (int src = 0; src < kSClusterBlocks; ++src) {
      v[src] = cluster.map_shared_rank(part_s, src)[i * Sm::kLdp + j];
    }
    float sum = v[0];
#pragma unroll
    for (int src = 1; src < kSClusterBlocks; ++src) sum += v[src];
    if (col0 + j < p.n) StoreSplitOut<T>(p, blk, i, col0 + j, sum);
  }
  cluster.sync();  // no rank leaves while another may still read its shared memory
#endif
}

}  // namespace tsm2
