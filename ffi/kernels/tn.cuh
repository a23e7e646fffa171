// TSM2T: C[m, n] = A^T @ B with A given k x m and B given k x n, both
// row-major and tall (k huge, m and n small): Gram matrices, centroid sums,
// and the gradient A^T @ G of a tall-and-skinny product.
//
// The paper has no kernel for this layout; it reuses TSM2's ideas with the
// roles turned: the long dimension is now the contraction, so
// - each block streams a contiguous range of rows of both operands (a split,
//   ffi/split_plans.h) through a cp.async ring in shared memory, whole rows
//   at a time, so every byte of A and B is read once with coalesced copies;
// - the output tile stays in registers for the whole range: each thread owns
//   an E x E block of it (register blocking: 2E shared-memory values feed
//   E^2 FMAs; E = 4 or 8, split_plans.h); when the tile has fewer 4 x 4 blocks than the block has
//   threads, groups of threads take interleaved rows and are added at the end in a fixed order;
// - splits are added by Tsm2SplitReduceKernel in split order, so the result
//   is bitwise reproducible (no float atomics).
#pragma once

#include <cstdint>

#include "ffi/kernels/common.cuh"
#include "ffi/kernels/split_reduce.cuh"
#include "ffi/split_plans.h"

namespace tsm2 {

constexpr int kTStages = 3;

// Bytes of shared memory one T block needs: the ring, or the group
// reduction buffer that reuses it afterwards, whichever is larger.
inline int TSmemBytes(const SplitPlan& s, int itemsize) {
  const int64_t row_bytes = (s.tile_m + s.tile_n) * itemsize;
  const int64_t ring = kTStages * s.step * row_bytes;
  const int64_t red = int64_t{kTThreads} * s.thread_edge * s.thread_edge * (itemsize == 8 ? 8 : 4);
  return static_cast<int>(ring > red ? ring : red);
}

// Copies rows [r0, r0 + step) of the A and B column slices of this tile into
// one stage, laid out row by row as [A slice | B slice]. Rows past `r_end`
// and columns past the matrix are zero-filled.
template <typename T>
__device__ __forceinline__ void LoadTStage(const SplitArgs& p, const T* a, const T* b, int64_t p0,
                                           int64_t q0, int64_t r0, int64_t r_end, T* stage) {
  const int row_elems = static_cast<int>(p.tile_m + p.tile_n);
  if (p.vec_ok) {
    const int vecs_per_row = row_elems / kVec<T>;
    const int a_vecs = static_cast<int>(p.tile_m) / kVec<T>;
    for (int q = threadIdx.x; q < p.step * vecs_per_row; q += kTThreads) {
      const int r = q / vecs_per_row, v = q % vecs_per_row;
      const int64_t row = r0 + r;
      const T* src;
      bool valid;
      if (v < a_vecs) {
        const int64_t col = p0 + static_cast<int64_t>(v) * kVec<T>;
        valid = row < r_end && col < p.m;
        src = a + row * p.m + col;
      } else {
        const int64_t col = q0 + static_cast<int64_t>(v - a_vecs) * kVec<T>;
        valid = row < r_end && col < p.n;
        src = b + row * p.n + col;
      }
      CpAsync16(stage + r * row_elems + v * kVec<T>, valid ? src : a, valid);
    }
  } else {
    for (int q = threadIdx.x; q < p.step * row_elems; q += kTThreads) {
      const int r = q / row_elems, e = q % row_elems;
      const int64_t row = r0 + r;
      T val = T(0.0f);
      if (row < r_end) {
        if (e < p.tile_m) {
          if (p0 + e < p.m) val = a[row * p.m + p0 + e];
        } else if (q0 + e - p.tile_m < p.n) {
          val = b[row * p.n + q0 + e - p.tile_m];
        }
      }
      stage[q] = val;
    }
  }
}

// E consecutive elements of a stage row (8-byte aligned at least) as
// accumulators, with the widest shared-memory loads the alignment allows.
template <typename T, int E>
__device__ __forceinline__ void LoadE(const T* src, AccType<T> (&out)[E]) {
  constexpr int kBytes = E * static_cast<int>(sizeof(T));
  T v[E];
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int w = 0; w < kBytes / 16; ++w) {
      const uint4 raw = reinterpret_cast<const uint4*>(src)[w];
      memcpy(reinterpret_cast<char*>(v) + 16 * w, &raw, 16);
    }
  } else {
    const uint2 raw = *reinterpret_cast<const uint2*>(src);
    memcpy(v, &raw, 8);
  }
#pragma unroll
  for (int i = 0; i < E; ++i) out[i] = ToAcc(v[i]);
}

template <typename T, int E>
__global__ void __launch_bounds__(kTThreads) Tsm2TKernel(const __grid_constant__ SplitArgs p) {
  using Acc = AccType<T>;
  extern __shared__ __align__(16) char smem[];
  T* ring = reinterpret_cast<T*>(smem);

  const SplitBlock blk = DecodeSplitBlock(p);
  const int64_t p0 = blk.tile_m * p.tile_m, q0 = blk.tile_n * p.tile_n;
  const int64_t r_begin = blk.split * p.split_len;
  const int64_t r_end = min(p.k, r_begin + p.split_len);
  const T* a = static_cast<const T*>(p.a) + blk.batch * p.a_batch_stride;
  const T* b = static_cast<const T*>(p.b) + blk.batch * p.b_batch_stride;

  // This thread's E x E output block (tp, tq) and its row group g.
  const int tpm = static_cast<int>(p.tile_m) / E;
  const int tile_threads = tpm * static_cast<int>(p.tile_n) / E;
  const int groups = kTThreads / tile_threads;
  const int g = threadIdx.x / tile_threads;
  const int tp = threadIdx.x % tile_threads % tpm;
  const int tq = threadIdx.x % tile_threads / tpm;
  const int row_elems = static_cast<int>(p.tile_m + p.tile_n);
  const int stage_elems = static_cast<int>(p.step) * row_elems;
  const int64_t steps = (r_end - r_begin + p.step - 1) / p.step;

#pragma unroll
  for (int s = 0; s < kTStages - 1; ++s) {
    if (s < steps)
      LoadTStage<T>(p, a, b, p0, q0, r_begin + s * p.step, r_end, ring + s * stage_elems);
    CpAsyncCommit();
  }

  Acc acc[E][E] = {};
  for (int64_t it = 0; it < steps; ++it) {
    CpAsyncWait<kTStages - 2>();
    __syncthreads();  // stage `it` has landed everywhere; stage it-1 is free
    const int64_t ip = it + kTStages - 1;
    if (ip < steps) {
      LoadTStage<T>(p, a, b, p0, q0, r_begin + ip * p.step, r_end,
                    ring + (ip % kTStages) * stage_elems);
    }
    CpAsyncCommit();
    const T* st = ring + (it % kTStages) * stage_elems;
    for (int r = g; r < p.step; r += groups) {
      Acc x[E], y[E];
      LoadE<T, E>(st + r * row_elems + E * tp, x);
      LoadE<T, E>(st + r * row_elems + p.tile_m + E * tq, y);
#pragma unroll
      for (int i = 0; i < E; ++i) {
#pragma unroll
        for (int j = 0; j < E; ++j) acc[i][j] = fma(x[i], y[j], acc[i][j]);
      }
    }
  }
  CpAsyncWait<0>();

  // Add the row groups in order (group 0 first), reusing the ring.
  if (groups > 1) {
    __syncthreads();
    Acc* red = reinterpret_cast<Acc*>(smem);
    const int t = threadIdx.x % tile_threads;
    constexpr int kE2 = E * E;
#pragma unroll
    for (int e = 0; e < kE2; ++e) red[(g * kE2 + e) * tile_threads + t] = acc[e / E][e % E];
    __syncthreads();
    if (g != 0) return;
#pragma unroll
    for (int e = 0; e < kE2; ++e) {
      Acc sum = 0;
      for (int gg = 0; gg < groups; ++gg) sum += red[(gg * kE2 + e) * tile_threads + t];
      acc[e / E][e % E] = sum;
    }
  }
#pragma unroll
  for (int i = 0; i < E; ++i) {
    const int64_t row = p0 + E * tp + i;
#pragma unroll
    for (int j = 0; j < E; ++j) {
      const int64_t col = q0 + E * tq + j;
      if (row < p.m && col < p.n) StoreSplitOut<T>(p, blk, row, col, acc[i][j]);
    }
  }
}

}  // namespace tsm2
