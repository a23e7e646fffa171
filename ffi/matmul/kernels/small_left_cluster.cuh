// TSM2S over thread-block clusters, for bf16, f16 and f32 on sm_90: C[m, n] =
// A[m, k] @ B[k, n], m <= 16.
//
// Why: with 32-column strips of B per block, DRAM sees 64-byte pieces of each
// row, and every strip reads all of A from the L2. Here
// a block owns kSClusterCols = 64 columns (128-byte runs of each row, one
// cache line) and one kSClusterBlocks-th (2) of its split of the contraction;
// the 2 blocks of a column tile form a cluster and add their partial sums
// through distributed shared memory, in a fixed order (deterministic), with
// no workspace and no second kernel unless the plan also splits across
// clusters. 4096 x 4096 is 64 column tiles x 2 = 128 blocks, one wave with
// one block per SM.
//
// Why 64 x 2 and not 256 columns x 8 ranks: only 15 clusters of 8 fit one
// block per SM on an H100 (30 of 4, 66 of 2), so the 16th of 4096 x 4096
// shared SMs and ended ~0.5 us after the rest. Lab on an H100 (bf16 m x 4096
// x 4096, m = 1 / 8 / 16, CUDA graphs, PDL): 256 x 8 13.3 / 13.8 / 14.4 us,
// 64 x 2 with A in every stage 13.2 / 13.6 / 14.0, against 12.8 for a plain
// read of B.
//
// A stage is kRows rows of the block's 64 columns, with chunk c of row r
// stored at c ^ (r % 8) so that the 8 rows x 16 bytes of an ldmatrix.trans
// matrix fall in 8 distinct bank groups. The same stage's kRows columns of A
// land beside it, in a ring of their own (rows m..15 zero, rows an odd number
// of 16-byte chunks apart), in the same cp.async group: A's whole slice of
// the rank in the prologue held the first stage back at large m (the lab's
// first stage took 3.0 us at m = 16, 1.3 at m = 1). Warp w multiplies 32
// columns (4 n8 tiles, w % 2) over every fourth k16 step of a stage (w / 2)
// with mma.sync m16n8k16; each stage's k16 chain starts from zero and is added
// to the warp's running f32 sum, as in the other half-precision kernels.
//
// f32 takes the same rings and reduction with 64-row stages (16 KB, as for
// 2-byte types) and no swizzle, but multiplies on the CUDA cores in f32
// (ClusterF32 below), so its results are f32 sums (no TF32), like the other
// f32 kernels.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>
#include <type_traits>

#include "ffi/common/half_mma.cuh"
#include "ffi/common/pdl.cuh"
#include "ffi/common/trace.h"
#include "ffi/matmul/kernels/split_reduce.cuh"
#include "ffi/matmul/split_plan.h"

namespace tsm2 {

// The two halves of a cluster barrier (sm_90). The arrival is relaxed: it
// publishes no memory, it only says "this block is done with the others'
// shared memory".
__device__ __forceinline__ void ClusterArriveRelaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void ClusterWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#endif
}

// Two floats rounded to T and packed in 32 bits, the first in the low half.
template <typename T>
__device__ __forceinline__ uint32_t PackPair(float x, float y) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

template <typename T, typename Tune = STuning>
struct ClusterSmem {
  static constexpr bool kHalf = sizeof(T) == 2;  // tensor cores; f32: CUDA cores
  static constexpr int kThreads = 256, kWarps = kThreads / 32;
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte copy
  static constexpr int kCols = kSClusterCols, kRows = SClusterRows<Tune>(sizeof(T));
  static constexpr int kStageElems = kRows * kCols;
  static constexpr int kRingBytes =
      Tune::kClusterStages * kStageElems * static_cast<int>(sizeof(T));
  // Warps: kWarpsN column slices of 32 times kWK groups that split a stage's
  // k16 steps (2-byte types).
  static constexpr int kWarpsN = kCols / 32, kWK = kWarps / kWarpsN;
  static constexpr int kK16PerWarp = kRows / 16 / kWK;
  // A's ring: kRows columns of A per stage, [16][kLda], rows m..15 zero, rows
  // an odd number of 16-byte chunks apart (ldmatrix rows in distinct bank
  // groups).
  static constexpr int kLda = kRows + kVec, kAStageElems = 16 * kLda;
  static constexpr int kBytes =
      kRingBytes + Tune::kClusterStages * kAStageElems * static_cast<int>(sizeof(T));
  static constexpr int kLdp = kCols + 8;  // row stride of the partial sums (floats)
  // Partial sums a block shares: one [16][kLdp] per k16 group (2-byte types);
  // f32 adds its groups itself (ClusterF32::Share).
  static constexpr int kParts = kHalf ? kWK : 1;
  static constexpr int kRedCols = kCols / kSClusterBlocks;  // columns each rank adds up
  static constexpr int kRedQuads = kRedCols / 4;
  static_assert(kRedCols % 4 == 0 && 16 * kRedQuads <= kThreads, "one quad of outputs per thread");
  static_assert(kCols % 32 == 0 && kWarps % kWarpsN == 0, "whole 32-column slices per warp");
  static_assert(kRows % (16 * kWK) == 0, "whole k16 steps per group (and float4s of A)");
  static_assert(kThreads % (kCols / kVec) == 0 && kRows % (kThreads / (kCols / kVec)) == 0,
                "whole rows per copy pass");
  static_assert(!kHalf || kLda * sizeof(T) % 32 == 16, "A's rows: odd numbers of 16-byte chunks");
  static_assert(kParts * 16 * kLdp * 4 <= kRingBytes, "the partial sums fit in the ring");
};

// This thread's 16-byte copies of B, stage after stage: chunk c of rows r,
// r + kPass, ... of every stage (kPass = 32 rows per copy pass for 2-byte
// types, so the swizzle r % 8 is the same for all of them; f32 is not
// swizzled). The stages are queued in order, so each one costs pointer steps
// and a row check. Working out a stage's addresses from its index instead
// (64-bit multiplies, ~100 instructions between the barrier and the first
// copy) held every stage's loads back: 14.14 -> 14.00 us at bf16 1 x 4096 x
// 4096 in the lab's graph timing.
template <typename T, typename Tune>
struct ClusterCopier {
  using Sm = ClusterSmem<T, Tune>;
  static constexpr int kChunks = Sm::kCols / Sm::kVec, kPass = Sm::kThreads / kChunks;
  static_assert(!Sm::kHalf || kPass % 8 == 0, "one swizzle per thread");
  static_assert(Sm::kRows % kPass == 0, "whole copy passes per stage");
  const T* src;        // this thread's chunk of the next stage's first row
  int64_t pass_step;   // kPass rows of B
  int rows_left, dst;  // the rank's rows from that row on; where the chunk lands
  bool col_ok;

  __device__ ClusterCopier(const SplitArgs& p, const T* b, int64_t col0, int64_t r_begin,
                           int rows) {
    const int c = threadIdx.x % kChunks, row = threadIdx.x / kChunks;
    col_ok = col0 + Sm::kVec * c < p.n;
    src = b + (r_begin + row) * p.n + col0 + Sm::kVec * c;
    pass_step = kPass * p.n;
    rows_left = rows - row;
    dst = row * Sm::kCols + Sm::kVec * (Sm::kHalf ? c ^ (row % 8) : c);
  }
  // Queues the next stage into `stage`; rows past the rank's and columns
  // past n are zeros.
  __device__ __forceinline__ void Next(const T* b, T* stage) {
    const T* from = src;
#pragma unroll
    for (int u = 0; u < Sm::kRows / kPass; ++u) {
      const bool valid = col_ok && u * kPass < rows_left;
      CpAsync16(stage + dst + u * kPass * Sm::kCols, valid ? from : b, valid);
      from += pass_step;
    }
    src = from;
    rows_left -= Sm::kRows;
  }
};

// Element by element through registers (B's rows not 16-byte aligned): rows
// [r0, r0 + kRows) of the block's columns into a stage, zeros past r_end
// and n.
template <typename T, typename Tune>
__device__ __forceinline__ void LoadClusterStageElems(const SplitArgs& p, const T* b, int64_t col0,
                                                      int64_t r0, int64_t r_end, T* stage) {
  using Sm = ClusterSmem<T, Tune>;
  for (int e = threadIdx.x; e < Sm::kRows * Sm::kCols; e += Sm::kThreads) {
    const int rr = e / Sm::kCols, j = e % Sm::kCols;
    const bool valid = r0 + rr < r_end && col0 + j < p.n;
    const int at = Sm::kHalf ? 8 * ((j / 8) ^ (rr % 8)) + j % 8 : j;
    stage[rr * Sm::kCols + at] = valid ? b[(r0 + rr) * p.n + col0 + j] : T(0.0f);
  }
}

// Zeros rows m..15 of every stage of A's ring (the copies never write them).
template <typename T, typename Tune>
__device__ __forceinline__ void ZeroClusterARows(const SplitArgs& p, T* as) {
  using Sm = ClusterSmem<T, Tune>;
  constexpr int kChunks = Sm::kLda / Sm::kVec, kPerStage = 16 * kChunks;
  for (int e = threadIdx.x; e < Tune::kClusterStages * kPerStage; e += Sm::kThreads) {
    const int row = e % kPerStage / kChunks;
    if (row >= p.m) *reinterpret_cast<uint4*>(as + Sm::kVec * e) = make_uint4(0, 0, 0, 0);
  }
}

// Queues A[:m, r0:r0 + kRows] into rows 0..m-1 of one stage of A's ring,
// zeros past r_end.
template <typename T, typename Tune, bool kVecOk>
__device__ __forceinline__ void LoadClusterA(const SplitArgs& p, const T* a, int64_t r0,
                                             int64_t r_end, T* as_stage) {
  using Sm = ClusterSmem<T, Tune>;
  if constexpr (kVecOk) {  // k % 8 == 0: a chunk is wholly inside or outside [.., r_end)
    constexpr int kChunks = Sm::kRows / Sm::kVec;
    for (int e = threadIdx.x; e < p.m * kChunks; e += Sm::kThreads) {
      const int i = e / kChunks, j = Sm::kVec * (e % kChunks);
      if (r0 + j < r_end) {
        CpAsync16(as_stage + i * Sm::kLda + j, a + i * p.k + r0 + j, true);
      } else {  // -0 times B's zero fill adds -0: a sum's zero keeps its sign
        for (int v = 0; v < Sm::kVec; ++v) as_stage[i * Sm::kLda + j + v] = T(-0.0f);
      }
    }
  } else {
    for (int e = threadIdx.x; e < p.m * Sm::kRows; e += Sm::kThreads) {
      const int i = e / Sm::kRows, j = e % Sm::kRows;
      as_stage[i * Sm::kLda + j] = r0 + j < r_end ? a[i * p.k + r0 + j] : T(-0.0f);
    }
  }
}

// The f32 product on the CUDA cores. Each thread owns 4 columns and all MT
// rows of A and adds their outer products with 4 rows of B at a time: 4 float4
// reads of B and MT float4 reads of A (row-major in shared memory, so a
// float4 is 4 rows of the contraction) feed 16 MT independent FMAs. The 256
// threads are 16 groups of 16 that take rows 4g..4g+3 of each 64-row stage;
// their sums are added in group order at the end. Measured at 1 x 4096 x
// 4096 on 256-column tiles (harness, device clock; m = 1 / 8 / 16): a thread
// per column with MT chained sums, 24.5 / 33 / 52 us (latency-bound); 4 x 4
// tiles with A's rows split between the groups, 24.5 / 27.9 / 40 (B read
// from shared memory once per group of A's rows).
template <int MT, typename Tune>
struct ClusterF32 {
  using Sm = ClusterSmem<float, Tune>;
  static constexpr int kGroups = Sm::kThreads / (Sm::kCols / 4);
  static_assert(kGroups * 4 == Sm::kRows, "one 4-row step per group per stage");
  static_assert(kGroups * MT * Sm::kLdp * 4 <= Sm::kBytes, "every group's sums fit");
  int g, col;  // the thread's rows 4g..4g+3 of a stage, first of its 4 columns
  float acc[MT][4];

  __device__ explicit ClusterF32(int64_t k) {
    InitSums(acc, k);
    g = static_cast<int>(threadIdx.x) / (Sm::kCols / 4);
    col = 4 * (static_cast<int>(threadIdx.x) % (Sm::kCols / 4));
  }

  __device__ __forceinline__ void Stage(const float* st, const float* as_stage) {
    float4 bq[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      bq[u] = *reinterpret_cast<const float4*>(st + (4 * g + u) * Sm::kCols + col);
    }
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const float4 aq = *reinterpret_cast<const float4*>(as_stage + i * Sm::kLda + 4 * g);
      const float av[4] = {aq.x, aq.y, aq.z, aq.w};
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        acc[i][0] = fmaf(av[u], bq[u].x, acc[i][0]);
        acc[i][1] = fmaf(av[u], bq[u].y, acc[i][1]);
        acc[i][2] = fmaf(av[u], bq[u].z, acc[i][2]);
        acc[i][3] = fmaf(av[u], bq[u].w, acc[i][3]);
      }
    }
  }

  // Leaves the block's sums of rows 0..m-1 in part_s[i][0..kCols), from
  // group g's in rows g * MT + i (all threads call this; the ring and A's
  // slice are free by then).
  __device__ __forceinline__ void Share(float* part_s, int m) const {
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      if (i < m) {
        *reinterpret_cast<float4*>(part_s + (g * MT + i) * Sm::kLdp + col) =
            make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < m * (Sm::kCols / 4); e += Sm::kThreads) {
      float* row = part_s + (e / (Sm::kCols / 4)) * Sm::kLdp + 4 * (e % (Sm::kCols / 4));
      float4 v = *reinterpret_cast<const float4*>(row);
#pragma unroll
      for (int gg = 1; gg < kGroups; ++gg) {
        const float4 w = *reinterpret_cast<const float4*>(row + gg * MT * Sm::kLdp);
        v.x += w.x;
        v.y += w.y;
        v.z += w.z;
        v.w += w.w;
      }
      *reinterpret_cast<float4*>(row) = v;
    }
  }
};

// 2-byte types keep their sums in m16n8 fragments.
struct ClusterNoF32 {
  __device__ explicit ClusterNoF32(int64_t) {}
};

// MT: rows of A the f32 path multiplies (m rounded up to a power of two);
// 16 for 2-byte types, whose m16 tiles always take 16. kVecOk: p.vec_ok, as
// a template argument so that the usual instantiation carries none of the
// element-by-element paths (the lab's graph timing: 14.01 -> 13.88 us at
// bf16 1 x 4096 x 4096 without them).
template <typename T, int MT, bool kVecOk, typename Tune>
__global__ void __launch_bounds__(ClusterSmem<T, Tune>::kThreads, 2)
    Tsm2SClusterKernel(const __grid_constant__ SplitArgs p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Sm = ClusterSmem<T, Tune>;
  static_assert(!Sm::kHalf || MT == 16, "2-byte types take m16 tiles");
  constexpr int S = Tune::kClusterStages;
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
  const int steps =
      r_end > r_begin ? static_cast<int>((r_end - r_begin + Sm::kRows - 1) / Sm::kRows) : 0;
  const T* a = static_cast<const T*>(p.a) + blk.batch * p.a_batch_stride;
  const T* b = static_cast<const T*>(p.b) + blk.batch * p.b_batch_stride;
  TSM2_TRACE_STAMP(0);
  if constexpr (Tune::kPdl) {
    // Launched as a programmatic dependent: the previous kernel's writes are
    // visible only after this.
    WaitForPrevious();
  }

  // Prologue: the first S - 1 stages of B, each with its columns of A, one
  // cp.async group per stage; every later wait leaves S - 2 groups pending.
  T* as = reinterpret_cast<T*>(smem + Sm::kRingBytes);
  const int rows = static_cast<int>(r_end - r_begin);
  ClusterCopier<T, Tune> copier(p, b, col0, r_begin, rows);
  auto load_stage = [&](int s) {  // stages are queued in order: 0, 1, 2, ...
    T* stage = ring + (s % S) * Sm::kStageElems;
    const int64_t r0 = r_begin + int64_t{s} * Sm::kRows;
    if constexpr (kVecOk) {
      copier.Next(b, stage);
    } else {
      LoadClusterStageElems<T, Tune>(p, b, col0, r0, r_end, stage);
    }
    LoadClusterA<T, Tune, kVecOk>(p, a, r0, r_end, as + (s % S) * Sm::kAStageElems);
  };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < steps) load_stage(s);
    CpAsyncCommit();
  }
  ZeroClusterARows<T, Tune>(p, as);  // seen by all after the loop's first barrier

  // ldmatrix rows: lane l addresses row l % 8 of matrix l / 8. A's matrices
  // are (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15); B's, per
  // 16 columns h, (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15,
  // n 8-15). A k16 step starts at a multiple of 16 rows, so a lane's row % 8
  // is lane % 8 and its swizzled chunk is the same at every step.
  const int lrow = lane % 8 + 8 * (lane / 8 % 2), lhi = lane / 16;
  const int a_off = lrow * Sm::kLda + 8 * lhi;
  const int wn = warp % Sm::kWarpsN, wk = warp / Sm::kWarpsN;  // column slice, k16 group
  int b_off[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    b_off[h] = lrow * Sm::kCols + 8 * ((4 * wn + 2 * h + lhi) ^ (lane % 8));

  float acc[4][4];  // 2-byte types: four m16n8 accumulators
  InitSums(acc, p.k);
  std::conditional_t<Sm::kHalf, ClusterNoF32, ClusterF32<MT, Tune>> f32(p.k);  // f32's sums
  for (int it = 0; it < steps; ++it) {
    CpAsyncWait<S - 2>();
    __syncthreads();  // stage `it` landed for every thread; stage it - 1 is free
    if (it == 0) TSM2_TRACE_STAMP(1);
    if (it + S - 1 < steps) load_stage(it + S - 1);
    CpAsyncCommit();

    const T* st = ring + (it % S) * Sm::kStageElems;
    const T* as_stage = as + (it % S) * Sm::kAStageElems;
    if constexpr (Sm::kHalf) {
      float part[4][4];
      InitSums(part, p.k);
#pragma unroll
      for (int q = 0; q < Sm::kK16PerWarp; ++q) {
        const int kr = 16 * (wk + Sm::kWK * q);
        uint32_t fa[4], fb[2][4];
        LdMatrixX4(as_stage + a_off + kr, fa);
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
    } else {
      f32.Stage(st, as_stage);
    }
  }
  CpAsyncWait<0>();
  __syncthreads();  // every warp is done with the ring: it now takes the partial sums
  TSM2_TRACE_STAMP(2);

  // m16n8 accumulators: lane holds rows lane / 4 and lane / 4 + 8, columns
  // 2 (lane % 4) and the next, of each n8 tile. Only the m real rows are kept.
  float* part_s = reinterpret_cast<float*>(smem);  // [kParts][16][kLdp]
  if constexpr (!Sm::kHalf) f32.Share(part_s, p.m);
#pragma unroll
  for (int f = 0; f < 4; ++f) {
    const int j = 32 * wn + 8 * f + 2 * (lane % 4);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int i = lane / 4 + 8 * hh;
      if (Sm::kHalf && i < p.m) {
        *reinterpret_cast<float2*>(part_s + (wk * 16 + i) * Sm::kLdp + j) =
            make_float2(acc[f][2 * hh], acc[f][2 * hh + 1]);
      }
    }
  }
  cluster.sync();  // every rank's partial sums are in its shared memory
  TSM2_TRACE_STAMP(3);

  // Rank r adds up columns [r * kRedCols, (r + 1) * kRedCols) of the tile
  // over the ranks and their k16 groups, in that order, four columns per
  // thread (one quad each: static_assert in ClusterSmem).
  constexpr int kSources = kSClusterBlocks * Sm::kParts;
  const int i = tid / Sm::kRedQuads, j = rank * Sm::kRedCols + 4 * (tid % Sm::kRedQuads);
  const bool mine = i < p.m && col0 + j < p.n;  // with vec_ok (n % 8 == 0), the whole quad
  float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
  if (mine) {
    float4 v[kSources];
#pragma unroll
    for (int src = 0; src < kSClusterBlocks; ++src) {
      const float* remote = cluster.map_shared_rank(part_s, src);
#pragma unroll
      for (int g = 0; g < Sm::kParts; ++g) {
        v[src * Sm::kParts + g] =
            *reinterpret_cast<const float4*>(remote + (g * 16 + i) * Sm::kLdp + j);
      }
    }
    sum = v[0];
#pragma unroll
    for (int src = 1; src < kSources; ++src) {
      sum.x += v[src].x;
      sum.y += v[src].y;
      sum.z += v[src].z;
      sum.w += v[src].w;
    }
  }
  // No rank may exit while another still reads its shared memory, but the
  // reads are done (their sums are in registers): a relaxed arrival lets the
  // stores of C below proceed without waiting on the barrier, and the
  // barrier without waiting on them (a cluster.sync here cost ~0.4 us in the
  // lab's block timeline, benchmarks/lab/s_lab.cu).
  ClusterArriveRelaxed();
  if (kVecOk && mine) {
    // One vector store: n % 8 == 0 and 16-byte aligned buffers (vec_ok)
    // align it, and the quad is inside n.
    const int64_t e = i * p.n + col0 + j;
    if (p.splits > 1) {
      float* part =
          static_cast<float*>(p.partials) + (blk.batch * p.splits + blk.split) * p.m * p.n;
      *reinterpret_cast<float4*>(part + e) = sum;
    } else if (!Sm::kHalf || p.out_f32) {
      *reinterpret_cast<float4*>(static_cast<float*>(p.c) + blk.batch * p.m * p.n + e) = sum;
    } else if constexpr (Sm::kHalf) {
      *reinterpret_cast<uint2*>(static_cast<T*>(p.c) + blk.batch * p.m * p.n + e) =
          make_uint2(PackPair<T>(sum.x, sum.y), PackPair<T>(sum.z, sum.w));
    }
  } else if (mine) {
    const float out[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (col0 + j + u < p.n) StoreSplitOut<T>(p, blk, i, col0 + j + u, out[u]);
    }
  }
  TSM2_TRACE_STAMP(4);
  ClusterWait();
  TSM2_TRACE_STAMP(5);
#else
  __trap();  // planned only on sm_90 and later (split_plan.h SPlan)
#endif
}

}  // namespace tsm2
