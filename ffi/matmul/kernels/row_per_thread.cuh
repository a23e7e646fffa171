// TSM2L for very short rows (k * itemsize of 16 or 32 bytes, and below, of
// 2, 4 or 8 bytes, several to a vector): the paper's thread-per-row kernel in
// its plainest form.
//
// In row-major storage a row this short is one or two 16-byte vectors, so
// threads owning consecutive rows read (and write) one contiguous run of
// memory: thread-per-row is coalesced without staging A in shared memory.
// The general TSM2L tile (tsm2.cuh) pays for a cp.async ring and for staging
// its output in shared memory, and measured 76-86% of the read ceiling on
// such rows; this kernel keeps its rows in registers.
// - TSM2L's optimizations: B (k x n, at most 16 x 16) sits in shared memory
//   for the whole run, and each thread computes whole rows of C.
// - A row of KV vectors is shared by KV neighbouring lanes, one vector each,
//   so every load and store instruction of a warp covers one contiguous run
//   (a lane per 32-byte row would leave half of each sector to a second
//   instruction); the lanes add their partial sums with shuffles.
// - The paper's prefetching (currA/nextA) is literal: the next U rows are
//   loaded into registers while the current U are computed.
// - TSM2L's thread-count factor is the persistent grid: each thread walks
//   rows with a grid-sized stride.
#pragma once

#include <cstdint>

#include "ffi/common/kernel_utils.cuh"

namespace tsm2 {

struct RowArgs {
  const void* a;
  const void* b;
  void* c;
  int64_t rows;  // batch * m: A and C are contiguous over the batch, B is shared
  int64_t n;     // columns of C (<= NT)
  bool out_f32;  // C is f32 although T is bf16/f16
  bool b_trans;  // B is given as n x k (layout NT)
  bool c_vec;    // n == NT, whole 16-byte output vectors per lane, C 16-byte aligned
  bool c_warp;   // otherwise, rows of one vector and C 16-byte aligned: a warp's
                 // 32 rows are written as one run
};

// KV 16-byte vectors per row (k = KV * kVec<T> exactly) and as many lanes per
// row; NT columns of B held (n <= NT); U rows per lane group per step;
// MinBlocks blocks per SM, which caps registers at 65536 / (256 * MinBlocks).
template <typename T, int KV, int NT, int U, int MinBlocks>
struct RowConfig {
  static constexpr int kThreads = 256;
  static constexpr int kK = KV * kVec<T>;
  static constexpr int kRowsPerStep = kThreads / KV * U;  // rows one block covers per step
  static constexpr int kOutPerLane = NT >= KV ? NT / KV : NT;
  // A warp's staged output (rows of one vector: 32 rows of up to NT values,
  // f32 for an f32 C of bf16/f16 products, else T).
  static constexpr int kWarpStageBytes = KV == 1 ? 32 * NT * (sizeof(T) > 4 ? 8 : 4) : 16;
  static_assert(KV == 1 || KV == 2, "rows of 16 or 32 bytes");
  static_assert(NT >= 1 && NT <= 8, "wider B is compute-bound here (bf16 16x16: 55%)");
};

// Vector `vec0 + u * blockDim.x` of A (one per lane, rows * KV in all), U times.
template <int KV, int U>
__device__ __forceinline__ void LoadVecs(const RowArgs& p, int64_t vec0, uint4 (&regs)[U]) {
  const uint4* a = static_cast<const uint4*>(p.a);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t vec = vec0 + static_cast<int64_t>(u) * blockDim.x;
    regs[u] = vec < p.rows * KV ? LoadStream16(a + vec) : make_uint4(0, 0, 0, 0);
  }
}

// Lane h of a row's group writes outputs [h * W, (h + 1) * W) of the row.
template <typename T, int W>
__device__ __forceinline__ void StoreLaneOut(const RowArgs& p, int64_t row, int j0,
                                             const AccType<T> (&out)[W]) {
  if (p.c_vec) {
    const int64_t at = row * p.n + j0;
    const bool done = p.out_f32 ? StoreRowVec<float, W>(static_cast<float*>(p.c) + at, out)
                                : StoreRowVec<T, W>(static_cast<T*>(p.c) + at, out);
    if (done) return;
  }
#pragma unroll
  for (int j = 0; j < W; ++j) {
    if (j0 + j < p.n) {
      if (p.out_f32) {
        static_cast<float*>(p.c)[row * p.n + j0 + j] = static_cast<float>(out[j]);
      } else {
        FromAcc(out[j], static_cast<T*>(p.c) + row * p.n + j0 + j);
      }
    }
  }
}

// Rows of one vector, a lane each: the warp's rows [row0, row0 + 32) of C,
// at most `left` of them, are one contiguous run that starts 16-byte aligned
// (row0 is a multiple of 32 and a row has n values of 2 bytes or more). Each
// lane puts its row in the warp's stage, then the warp writes the run as
// 16-byte vectors. Written lane by lane instead, rows of 7 bf16 values take
// 7 store instructions, each touching 14 sectors for 2 sectors of data.
template <typename U, int W, typename Acc>
__device__ __forceinline__ void StoreWarpRows(const RowArgs& p, U* stage, int64_t row0,
                                              int64_t left, bool writes, const Acc (&out)[W]) {
  const int lane = threadIdx.x % 32;
  if (writes) {
#pragma unroll
    for (int j = 0; j < W; ++j) {
      if (j < p.n) FromAcc(out[j], stage + lane * p.n + j);
    }
  }
  __syncwarp();
  constexpr int kPerVec = 16 / static_cast<int>(sizeof(U));
  const int values = static_cast<int>((left < 32 ? left : 32) * p.n);
  U* dst = static_cast<U*>(p.c) + row0 * p.n;
  const int vecs = left > 0 ? values / kPerVec : 0;
  for (int v = lane; v < vecs; v += 32) {
    reinterpret_cast<uint4*>(dst)[v] = reinterpret_cast<const uint4*>(stage)[v];
  }
  for (int e = vecs * kPerVec + lane; e < values; e += 32) dst[e] = stage[e];
  __syncwarp();  // the stage is written again at the next step
}

template <typename T, int KV, int NT, int U, int MinBlocks>
__global__ void __launch_bounds__(256, MinBlocks)
    Tsm2LRowKernel(const __grid_constant__ RowArgs p) {
  using Cfg = RowConfig<T, KV, NT, U, MinBlocks>;
  using Acc = AccType<T>;
  constexpr int K = Cfg::kK, V = kVec<T>, W = Cfg::kOutPerLane;
  __shared__ __align__(16) Acc bs[K * NT];  // B[kk][j], columns past n zero
  __shared__ __align__(16) unsigned char stages[Cfg::kThreads / 32][Cfg::kWarpStageBytes];
  unsigned char* stage = stages[threadIdx.x / 32];
  const T* b = static_cast<const T*>(p.b);
  for (int e = threadIdx.x; e < K * NT; e += blockDim.x) {
    const int kk = e / NT, j = e % NT;
    bs[e] = j < p.n ? ToAcc(b[p.b_trans ? j * K + kk : kk * p.n + j]) : Acc(0);
  }
  __syncthreads();

  const int h = threadIdx.x % KV;  // which vector of its row this lane holds
  // Steps are counted in vectors and are the same for the whole block, so
  // every lane of a warp runs the same iterations (the shuffles need that).
  const int64_t total = p.rows * KV;
  const int64_t step = static_cast<int64_t>(Cfg::kRowsPerStep) * KV;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * step;
  int64_t base = static_cast<int64_t>(blockIdx.x) * step;
  uint4 cur[U];
  LoadVecs<KV, U>(p, base + threadIdx.x, cur);
  for (; base < total; base += stride) {
    uint4 next[U];
    LoadVecs<KV, U>(p, base + stride + threadIdx.x, next);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      Acc av[V];
      Unpack<T>(cur[u], av);
      Acc acc[NT];
      InitSums(acc, K);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        Acc bv[NT];
        LoadSmemRow<NT>(bs + (h * V + e) * NT, bv);
#pragma unroll
        for (int j = 0; j < NT; ++j) acc[j] = fma(av[e], bv[j], acc[j]);
      }
      if constexpr (KV == 2) {
        // Both lanes of the row end with its full sums, added in the same
        // order, so the halves they write come from identical values.
#pragma unroll
        for (int j = 0; j < NT; ++j) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], 1);
      }
      const int64_t vec = base + threadIdx.x + static_cast<int64_t>(u) * blockDim.x;
      const bool writes = vec < total && (NT >= KV || h == 0);
      // Lane h writes outputs [h * W, (h + 1) * W); selected with constant
      // indices so that acc stays in registers.
      Acc out[W];
#pragma unroll
      for (int j = 0; j < W; ++j) out[j] = (NT >= KV && h == 1) ? acc[(W + j) % NT] : acc[j];
      const int j0 = NT >= KV ? h * W : 0;
      if (KV == 1 && p.c_warp) {
        // Every lane of the warp takes this branch (p is uniform), as
        // __syncwarp needs; a vector is a row here.
        const int64_t row0 = vec - threadIdx.x % 32, left = total - row0;
        if (p.out_f32) {
          StoreWarpRows<float>(p, reinterpret_cast<float*>(stage), row0, left, writes, out);
        } else {
          StoreWarpRows<T>(p, reinterpret_cast<T*>(stage), row0, left, writes, out);
        }
      } else if (writes) {
        StoreLaneOut<T, W>(p, vec / KV, j0, out);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) cur[u] = next[u];
  }
}

// Rows of 2, 4 or 8 bytes: one 16-byte vector of A holds R = 16 / (k * itemsize)
// whole rows, so a lane loads one vector and computes R rows of C. A warp's
// 32 * R rows of C are one contiguous run of 32 * R * n values: each lane puts
// its R * n values in the warp's stage, kStride apart, and the warp writes the
// run with consecutive lanes on consecutive values. kStride is odd (in
// accumulator words) so that the 32 lanes writing their first value meet 32
// different banks; at an even stride of R * n (64 words for bf16 k = 1, n = 8)
// all 32 land in one bank.
template <typename T, int R, int NT, int U>
struct PackedRowConfig {
  using Acc = AccType<T>;
  static constexpr int kK = kVec<T> / R;  // elements per row
  static constexpr int kStride = R * NT % 2 == 0 ? R * NT + 1 : R * NT;
  static constexpr int kWarpStage = 32 * kStride;  // accumulator values
  // 256 threads where eight warps' stages fit in 40 KB of static shared
  // memory; bf16/f16 rows of one value at n = 8 (8 KB a warp) take 128.
  static constexpr int kThreads =
      8 * kWarpStage * static_cast<int>(sizeof(Acc)) <= 40 * 1024 ? 256 : 128;
  static constexpr int kMinBlocks = 512 / kThreads;  // 128 registers a thread
  static_assert(R == 2 || R == 4 || R == 8, "rows of 8, 4 or 2 bytes");
  static_assert(kK * R == kVec<T>, "whole rows per vector");
  static_assert(NT >= 1 && NT <= 8, "n <= 8 as the row kernel");
};

// Vector `vec` of A (R rows), or its first rows where the last vector is not
// whole: A ends inside it, so it is read element by element, the rest zero.
template <typename T, int R>
__device__ __forceinline__ uint4 LoadPackedVec(const RowArgs& p, int64_t vec) {
  constexpr int K = kVec<T> / R;
  const int64_t whole = p.rows / R;
  if (vec < whole) return LoadStream16(static_cast<const uint4*>(p.a) + vec);
  uint4 v = make_uint4(0, 0, 0, 0);
  if (vec == whole) {
    T e[kVec<T>];
    memcpy(e, &v, sizeof v);
    const T* a = static_cast<const T*>(p.a) + vec * kVec<T>;
    const int valid = static_cast<int>(p.rows - whole * R) * K;
#pragma unroll
    for (int i = 0; i < kVec<T>; ++i) {
      if (i < valid) e[i] = a[i];
    }
    memcpy(&v, e, sizeof v);
  }
  return v;
}

// The warp's run of C: rows [row0, row0 + 32 * R), at most `left` of them,
// whose values lane l staged at stage[l * kStride + (r * n + j)]. Value e of
// the run is stage[(e / w) * kStride + e % w] with w = R * n; the quotient and
// remainder advance by 32 each step instead of being divided afresh.
template <typename O, typename Cfg>
__device__ __forceinline__ void StorePackedRun(const RowArgs& p, const typename Cfg::Acc* stage,
                                               int64_t row0, int64_t left, int R) {
  const int lane = threadIdx.x % 32;
  const int w = R * static_cast<int>(p.n);
  const int64_t rows = left < 32 * R ? left : 32 * R;
  const int values = static_cast<int>(rows) * static_cast<int>(p.n);
  O* dst = static_cast<O*>(p.c) + row0 * p.n;
  const int step_q = 32 / w, step_r = 32 % w;
  int q = lane / w, r = lane % w;
  for (int e = lane; e < values; e += 32) {
    FromAcc(stage[q * Cfg::kStride + r], dst + e);
    q += step_q;
    r += step_r;
    if (r >= w) {
      r -= w;
      ++q;
    }
  }
}

template <typename T, int R, int NT, int U>
__global__ void __launch_bounds__(PackedRowConfig<T, R, NT, U>::kThreads,
                                  PackedRowConfig<T, R, NT, U>::kMinBlocks)
    Tsm2LPackedRowKernel(const __grid_constant__ RowArgs p) {
  using Cfg = PackedRowConfig<T, R, NT, U>;
  using Acc = typename Cfg::Acc;
  constexpr int K = Cfg::kK;
  __shared__ __align__(16) Acc bs[K * NT];  // B[kk][j], columns past n zero
  __shared__ Acc stages[Cfg::kThreads / 32][Cfg::kWarpStage];
  Acc* stage = stages[threadIdx.x / 32];
  const T* b = static_cast<const T*>(p.b);
  for (int e = threadIdx.x; e < K * NT; e += blockDim.x) {
    const int kk = e / NT, j = e % NT;
    bs[e] = j < p.n ? ToAcc(b[p.b_trans ? j * K + kk : kk * p.n + j]) : Acc(0);
  }
  __syncthreads();

  // A step is U groups of a vector per thread of the grid, each group read by
  // the whole grid, so that a product of few vectors still spreads over a
  // block per kThreads of them (the plan sizes the grid so) rather than over
  // one per kThreads * U. Steps are the same for the whole grid, so every lane
  // of a warp runs the same iterations (the stage's __syncwarp needs that).
  const int64_t total = (p.rows + R - 1) / R;  // vectors, the last maybe partial
  const int64_t group = static_cast<int64_t>(gridDim.x) * Cfg::kThreads;
  const int64_t stride = group * U;
  const int64_t mine = static_cast<int64_t>(blockIdx.x) * Cfg::kThreads + threadIdx.x;
  int64_t base = 0;
  uint4 cur[U];
#pragma unroll
  for (int u = 0; u < U; ++u) cur[u] = LoadPackedVec<T, R>(p, base + u * group + mine);
  for (; base < total; base += stride) {
    uint4 next[U];
#pragma unroll
    for (int u = 0; u < U; ++u) next[u] = LoadPackedVec<T, R>(p, base + stride + u * group + mine);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      Acc av[kVec<T>];
      Unpack<T>(cur[u], av);
      const int lane = threadIdx.x % 32;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        Acc acc[NT];
        InitSums(acc, K);
#pragma unroll
        for (int kk = 0; kk < K; ++kk) {
          Acc bv[NT];
          LoadSmemRow<NT>(bs + kk * NT, bv);
#pragma unroll
          for (int j = 0; j < NT; ++j) acc[j] = fma(av[r * K + kk], bv[j], acc[j]);
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if (j < p.n) stage[lane * Cfg::kStride + r * p.n + j] = acc[j];
        }
      }
      __syncwarp();
      // The warp's first vector; its rows start the run.
      const int64_t vec0 = base + u * group + mine - lane;
      const int64_t row0 = vec0 * R, left = p.rows - row0;
      if (left > 0) {
        if (p.out_f32) {
          StorePackedRun<float, Cfg>(p, stage, row0, left, R);
        } else {
          StorePackedRun<T, Cfg>(p, stage, row0, left, R);
        }
      }
      __syncwarp();  // the stage is written again at the next step
    }
#pragma unroll
    for (int u = 0; u < U; ++u) cur[u] = next[u];
  }
}

}  // namespace tsm2
