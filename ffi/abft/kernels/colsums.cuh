// Weighted column sums at the read ceiling: out[q, :] = sum_i v[q, i] *
// f_q(M[i, :]) for r <= 4 weight rows (f_q = |.| where bit q of abs_rows is
// set), every byte of M read once. The ABFT checksums (jax_tsm2/abft.py) are
// three such passes, over A, B and C.
//
// TSM2S (small_left.cuh) specialised to r <= 4 rows of weights, whose r
// values per row of M are all the "A" there is: no shared-memory ring, the
// loads go straight to registers.
// - A lane owns one 16-byte vector of columns (kVec<T> of them) and keeps
//   r x kVec<T> accumulators; a row of a block's column tile is `lanes` lanes
//   wide, so a narrow M (n = 16 f32: 4 lanes) still gives every lane a vector
//   and a warp reads 32 / lanes whole rows per load instruction.
// - Each thread has kColsumsRowsInFlight rows in flight while it adds the
//   previous kColsumsRowsInFlight (prefetching as in row_per_thread.cuh).
// - The warps of a block take interleaved rows of its split; slots of a warp
//   are added by a fixed shuffle butterfly, warps in warp order through
//   shared memory, splits in split order by AbftColsumsReduceKernel: the
//   result depends on the plan alone (bitwise reproducible).
// - Rows whose length is not a whole number of vectors (or an unaligned M)
//   take element loads with the same mapping (vec_ok false).
#pragma once

#include <cstdint>

#include "ffi/abft/plan.h"
#include "ffi/common/kernel_utils.cuh"

namespace tsm2 {

struct ColsumsArgs {
  const void* m;   // [rows, cols] T
  const void* v;   // [r, rows] Acc
  void* out;       // [r, cols] Acc
  void* partials;  // [splits, r, cols] Acc when splits > 1
  int64_t rows, cols;
  int64_t tile_cols, tiles, splits, split_len;
  int lanes;
  uint32_t abs_rows;
  bool vec_ok;  // cols is a whole number of vectors and M is 16-byte aligned
};

// Rows row0 + u * stride (u < U) of this lane's column vector; rows at or
// past row_end and columns past cols read as zero.
template <typename T, int U>
__device__ __forceinline__ void LoadColsumsRows(const ColsumsArgs& p, int64_t row0, int64_t stride,
                                                int64_t row_end, int64_t col, uint4 (&raw)[U]) {
  const T* m = static_cast<const T*>(p.m);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t row = row0 + u * stride;
    if (p.vec_ok) {
      raw[u] = row < row_end && col < p.cols ? LoadStream16(m + row * p.cols + col)
                                             : make_uint4(0, 0, 0, 0);
    } else {
      T e[kVec<T>];
#pragma unroll
      for (int c = 0; c < kVec<T>; ++c) {
        e[c] = row < row_end && col + c < p.cols ? m[row * p.cols + col + c] : T(0.0f);
      }
      memcpy(&raw[u], e, sizeof e);
    }
  }
}

// The r weights of the same rows (zero past row_end, so those rows add 0).
template <typename Acc, int R, int U>
__device__ __forceinline__ void LoadColsumsWeights(const ColsumsArgs& p, int64_t row0,
                                                   int64_t stride, int64_t row_end,
                                                   Acc (&w)[U][R]) {
  const Acc* v = static_cast<const Acc*>(p.v);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t row = row0 + u * stride;
#pragma unroll
    for (int q = 0; q < R; ++q) w[u][q] = row < row_end ? __ldg(v + q * p.rows + row) : Acc(0);
  }
}

template <typename T, typename Acc, int R>
__global__ void __launch_bounds__(kColsumsThreads)
    AbftColsumsKernel(const __grid_constant__ ColsumsArgs p) {
  constexpr int U = kColsumsRowsInFlight, V = kVec<T>;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int slots = kColsumsThreads / p.lanes;  // rows a block loads per instruction
  const int slot = threadIdx.x / p.lanes;
  // Consecutive blocks take neighbouring tiles of the same rows.
  const int64_t tile = blockIdx.x % p.tiles, split = blockIdx.x / p.tiles;
  const int64_t col = tile * p.tile_cols + static_cast<int64_t>(threadIdx.x % p.lanes) * V;
  const int64_t r_begin = split * p.split_len;
  const int64_t r_end = min(p.rows, r_begin + p.split_len);
  const int64_t stride = static_cast<int64_t>(slots);
  const int64_t step = stride * U;

  bool absq[R];
#pragma unroll
  for (int q = 0; q < R; ++q) absq[q] = (p.abs_rows >> q) & 1u;
  Acc acc[R][V];
#pragma unroll
  for (int q = 0; q < R; ++q) {
#pragma unroll
    for (int e = 0; e < V; ++e) acc[q][e] = 0;
  }

  int64_t base = r_begin + slot;
  uint4 cur[U];
  LoadColsumsRows<T, U>(p, base, stride, r_end, col, cur);
  for (; base < r_end; base += step) {
    uint4 next[U];
    LoadColsumsRows<T, U>(p, base + step, stride, r_end, col, next);
    // The weights are L1/L2 hits (every column tile reads the same ones):
    // loaded here rather than prefetched, they hold no registers across the
    // loop, which leaves room for more blocks and so more loads in flight.
    Acc w[U][R];
    LoadColsumsWeights<Acc, R, U>(p, base, stride, r_end, w);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      AccType<T> x[V];
      Unpack<T>(cur[u], x);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const Acc xe = static_cast<Acc>(x[e]);
#pragma unroll
        for (int q = 0; q < R; ++q) acc[q][e] = fma(w[u][q], absq[q] ? fabs(xe) : xe, acc[q][e]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) cur[u] = next[u];
  }

  // The slots of a warp (lanes lanes apart) by a butterfly: every lane of a
  // column ends with the same sum.
  for (int off = p.lanes; off < 32; off *= 2) {
#pragma unroll
    for (int q = 0; q < R; ++q) {
#pragma unroll
      for (int e = 0; e < V; ++e) acc[q][e] += __shfl_xor_sync(0xffffffffu, acc[q][e], off);
    }
  }

  // Then the warps in order, one weight row at a time.
  __shared__ Acc red[kColsumsThreads / 32][32 * V];
  Acc* out = static_cast<Acc*>(p.splits > 1 ? p.partials : p.out);
  const int64_t out_row0 = p.splits > 1 ? split * R : 0;
#pragma unroll
  for (int q = 0; q < R; ++q) {
    if (lane < p.lanes) {
#pragma unroll
      for (int e = 0; e < V; ++e) red[warp][lane * V + e] = acc[q][e];
    }
    __syncthreads();
    if (threadIdx.x < p.tile_cols) {
      Acc sum = red[0][threadIdx.x];
#pragma unroll
      for (int w = 1; w < kColsumsThreads / 32; ++w) sum += red[w][threadIdx.x];
      const int64_t c = tile * p.tile_cols + threadIdx.x;
      if (c < p.cols) out[(out_row0 + q) * p.cols + c] = sum;
    }
    __syncthreads();
  }
}

// out[e] = sum over splits of partials[s][e], in split order; e runs over the
// r x cols outputs. kWarpEach: a warp per output (lane l adds splits l,
// l + 32, ..., then a fixed shuffle tree) for many splits, where one thread
// per output would serialise on load latency; else a thread per output.
template <typename Acc, bool kWarpEach>
__global__ void AbftColsumsReduceKernel(const Acc* __restrict__ partials, Acc* __restrict__ out,
                                        int64_t splits, int64_t elems) {
  const int lanes = kWarpEach ? 32 : 1;
  const int lane = kWarpEach ? threadIdx.x % 32 : 0;
  const int64_t worker = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / lanes;
  const int64_t workers = static_cast<int64_t>(gridDim.x) * blockDim.x / lanes;
  // Whole warps iterate together (the bound is the same for a warp).
  for (int64_t o = worker; o < elems; o += workers) {
    Acc sum = 0;
    for (int64_t s = lane; s < splits; s += lanes) sum += partials[s * elems + o];
    if constexpr (kWarpEach) {
#pragma unroll
      for (int d = 16; d > 0; d /= 2) sum += __shfl_down_sync(0xffffffffu, sum, d);
      if (lane != 0) continue;
    }
    out[o] = sum;
  }
}

}  // namespace tsm2
