// Per-cluster sums of w * x, total weights and the inertia for any k, from
// the labels, by buckets of clusters, without atomics or a sort (tiled_plan.h
// for the plan).
//
// Block (chunk, bucket) owns clusters [bucket * B, bucket * B + B) and rows
// [KmeansChunkBegin(chunk), KmeansChunkBegin(chunk + 1)). It reads its rows'
// labels a tile of 1024 at a time, lists (in row order) the rows whose
// cluster it owns, and adds them: thread (group, chunk q) owns the 16-byte
// column chunk q of its group's copy of the sums in shared memory, and group
// g takes entries g, g + G, ... of the list, in order. So every sum is added
// in one fixed order, with fma(w, x, sum), without atomics: the copies are
// added in group order at the end, then (chunks > 1) KmeansSumsReduceKernel
// adds the blocks' partials in chunk order. The CPU reference
// (cpu_tiled_handler.cc) follows the same order and gets the same bits.
//
// The plans take this path only where one bucket holds all k clusters (X
// and the labels read once, one launch); with more buckets every bucket
// would scan every label, so the plans sort the rows instead
// (kmeans_sums_sorted.cuh). Explicit attributes, and a launcher's fallback
// where a sorted plan's workspace is missing, may still ask for several.
//
// The inertia, sum of w * mind, is added by the blocks of bucket 0 over all
// their chunk's rows: thread t takes rows t, t + 256, ... of each tile in
// order, then the warp adds its lanes by butterfly and the block its warps
// in order.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ffi/common/kernel_utils.cuh"
#include "ffi/kmeans/tiled_plan.h"

namespace tsm2 {

struct KmeansSumsArgs {
  const void* x;          // [n, d] T
  const void* w;          // [n] Acc
  const int32_t* labels;  // [n]
  const void* mind;       // [n] Acc
  void* sums;             // [k, d] Acc
  void* counts;           // [k] Acc
  void* inertia;          // [] Acc
  void* partials;         // [buckets, chunks, bucket * d + bucket + 1] Acc when chunks > 1
  int64_t n, k;
  int d;
  int bucket, chunks, groups, q;  // q: 16-byte chunks of a row of accumulators
  bool x_vec;                     // rows of whole chunks, X aligned: vector loads
};

// kV elements of row `row` from column 4 q (f32, bf16, f16) or 2 q (f64) as
// accumulators, zero past d.
template <typename T, typename Acc, int kV>
__device__ __forceinline__ void KmeansSumsLoad(const KmeansSumsArgs& a, int64_t row, int q,
                                               Acc (&out)[kV]) {
  const T* x = static_cast<const T*>(a.x) + row * a.d;
  const int col0 = q * kV;
  if (a.x_vec) {
    T v[kV];
    if constexpr (sizeof(T) * kV == 16) {
      const uint4 raw = *reinterpret_cast<const uint4*>(x + col0);
      memcpy(v, &raw, 16);
    } else {
      const uint2 raw = *reinterpret_cast<const uint2*>(x + col0);
      memcpy(v, &raw, 8);
    }
#pragma unroll
    for (int e = 0; e < kV; ++e) out[e] = static_cast<Acc>(ToAcc(v[e]));
  } else {
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      out[e] = col0 + e < a.d ? static_cast<Acc>(ToAcc(x[col0 + e])) : Acc(0);
    }
  }
}

template <typename T, typename Acc>
__global__ void __launch_bounds__(kSumsThreads, 1)
    KmeansSumsKernel(const __grid_constant__ KmeansSumsArgs a) {
  constexpr int kV = 16 / static_cast<int>(sizeof(Acc));
  extern __shared__ __align__(16) char smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t chunk = blockIdx.x, b = blockIdx.y;
  const int64_t c0 = b * a.bucket;
  const int kb = static_cast<int>(a.k - c0 < a.bucket ? a.k - c0 : a.bucket);
  const int64_t r0 = KmeansChunkBegin(a.n, a.chunks, chunk);
  const int64_t r1 = KmeansChunkBegin(a.n, a.chunks, chunk + 1);
  const int G = a.groups, Q = a.q;
  const int row_acc = Q * kV;  // accumulators per cluster row (d padded to chunks)

  int32_t* list_row = reinterpret_cast<int32_t*>(smem);  // offsets within the chunk
  int32_t* list_lab = list_row + kSumsTileRows;
  int32_t* warp_n = list_lab + kSumsTileRows;  // [round][warp] matches; then the warps' inertia
  Acc* sums = reinterpret_cast<Acc*>(smem + kSumsStaticSmem);  // [G][bucket][row_acc]
  Acc* cnts = sums + int64_t{G} * a.bucket * row_acc;          // [G][bucket]
  for (int64_t i = tid; i < int64_t{G} * a.bucket * (row_acc + 1); i += kSumsThreads)
    sums[i] = Acc(0);

  // This thread's group and first chunk; a group is Q threads (or the block
  // when Q > 256, each thread taking chunks q, q + 256, ...).
  const int grp = Q >= kSumsThreads ? 0 : tid / Q;
  const int q0 = Q >= kSumsThreads ? tid : tid % Q;
  const bool active = Q >= kSumsThreads || grp < G;
  const Acc* w = static_cast<const Acc*>(a.w);
  const Acc* mind = static_cast<const Acc*>(a.mind);
  Acc inertia = 0;
  __syncthreads();

  for (int64_t tile0 = r0; tile0 < r1; tile0 += kSumsTileRows) {
    // The tile's rows of this bucket, listed in row order: every label's ballot first, one
    // barrier for the warps' counts, positions in (round, warp, lane) order, which is row order.
    constexpr int kW = kSumsThreads / 32, kU = kSumsLabelsPerThread;
    uint32_t ballot[kU];
    int32_t lab[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t row = tile0 + u * kSumsThreads + tid;
      const bool in = row < r1;
      lab[u] = in ? a.labels[row] : -1;
      if (b == 0 && in) inertia = fma(w[row], mind[row], inertia);
      ballot[u] = __ballot_sync(0xffffffffu, in && lab[u] >= c0 && lab[u] < c0 + kb);
      if (lane == 0) warp_n[u * kW + warp] = __popc(ballot[u]);
    }
    __syncthreads();
    int base = 0;
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      int before = 0, total = 0;
#pragma unroll
      for (int v = 0; v < kW; ++v) {
        const int cnt = warp_n[u * kW + v];
        before += v < warp ? cnt : 0;
        total += cnt;
      }
      if ((ballot[u] >> lane) & 1u) {
        const int at = base + before + __popc(ballot[u] & ((1u << lane) - 1u));
        list_row[at] = static_cast<int32_t>(tile0 + u * kSumsThreads + tid - r0);
        list_lab[at] = static_cast<int32_t>(lab[u] - c0);
      }
      base += total;
    }
    __syncthreads();  // the list is complete
    const int m = base;

    // Group grp adds entries grp, grp + G, ... in order, kSumsPrefetch rows in flight.
    if (active) {
      for (int q = q0; q < Q; q += kSumsThreads) {
        Acc* mine = sums + int64_t{grp} * a.bucket * row_acc + q * kV;
        Acc* my_cnt = cnts + int64_t{grp} * a.bucket;
        for (int e0 = grp; e0 < m; e0 += G * kSumsPrefetch) {
          Acc xv[kSumsPrefetch][kV];
          Acc wv[kSumsPrefetch];
          int cl[kSumsPrefetch];  // the entries' clusters in the bucket (-1: none)
#pragma unroll
          for (int u = 0; u < kSumsPrefetch; ++u) {
            const int e = e0 + u * G;
            cl[u] = -1;
            if (e < m) {
              const int64_t row = r0 + list_row[e];
              cl[u] = list_lab[e];
              wv[u] = w[row];
              KmeansSumsLoad<T, Acc, kV>(a, row, q, xv[u]);
            }
          }
#pragma unroll
          for (int u = 0; u < kSumsPrefetch; ++u) {
            if (cl[u] < 0) continue;
            // One 16-byte chunk: rows of the sums are whole chunks, 16-byte aligned.
            uint4* s = reinterpret_cast<uint4*>(mine + int64_t{cl[u]} * row_acc);
            Acc sv[kV];
            const uint4 old = *s;
            memcpy(sv, &old, 16);
#pragma unroll
            for (int e = 0; e < kV; ++e) sv[e] = fma(wv[u], xv[u][e], sv[e]);
            uint4 upd;
            memcpy(&upd, sv, 16);
            *s = upd;
            if (q == 0) my_cnt[cl[u]] += wv[u];
          }
        }
      }
    }
    __syncthreads();  // the list is rewritten by the next tile
  }

  // The block's sums: the groups' copies added in group order.
  const bool direct = a.chunks == 1;
  Acc* out_sums = static_cast<Acc*>(a.sums);
  Acc* part = direct ? nullptr
                     : static_cast<Acc*>(a.partials) +
                           (b * a.chunks + chunk) * (int64_t{a.bucket} * a.d + a.bucket + 1);
  for (int64_t i = tid; i < int64_t{kb} * a.d; i += kSumsThreads) {
    const int64_t l = i / a.d, col = i % a.d;
    Acc tot = sums[l * row_acc + col];
    for (int gg = 1; gg < G; ++gg) tot += sums[(int64_t{gg} * a.bucket + l) * row_acc + col];
    if (direct) {
      out_sums[(c0 + l) * a.d + col] = tot;
    } else {
      part[l * a.d + col] = tot;
    }
  }
  for (int l = tid; l < kb; l += kSumsThreads) {
    Acc tot = cnts[l];
    for (int gg = 1; gg < G; ++gg) tot += cnts[int64_t{gg} * a.bucket + l];
    if (direct) {
      static_cast<Acc*>(a.counts)[c0 + l] = tot;
    } else {
      part[int64_t{a.bucket} * a.d + l] = tot;
    }
  }
  if (b == 0) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) inertia += __shfl_xor_sync(0xffffffffu, inertia, off);
    Acc* warp_in = reinterpret_cast<Acc*>(warp_n + kSumsLabelsPerThread * kSumsThreads / 32);
    if (lane == 0) warp_in[warp] = inertia;
    __syncthreads();
    if (tid == 0) {
      Acc tot = warp_in[0];
      for (int v = 1; v < kSumsThreads / 32; ++v) tot += warp_in[v];
      if (direct) {
        *static_cast<Acc*>(a.inertia) = tot;
      } else {
        part[int64_t{a.bucket} * a.d + a.bucket] = tot;
      }
    }
  }
}

// sums, counts and the inertia from the blocks' partials, added in chunk
// order: element o of the output is element (bucket of o, its offset) of
// each chunk's partial.
template <typename Acc>
__global__ void __launch_bounds__(256)
    KmeansSumsReduceKernel(const Acc* __restrict__ part, int64_t k, int d, int64_t bucket,
                           int64_t chunks, Acc* __restrict__ sums, Acc* __restrict__ counts,
                           Acc* __restrict__ inertia) {
  const int64_t per = bucket * d + bucket + 1;
  const int64_t total = k * d + k + 1;
  for (int64_t o = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; o < total;
       o += int64_t{gridDim.x} * blockDim.x) {
    int64_t b, off;
    Acc* out;
    if (o < k * d) {
      const int64_t c = o / d, col = o % d;
      b = c / bucket;
      off = (c % bucket) * d + col;
      out = sums + o;
    } else if (o < k * d + k) {
      const int64_t c = o - k * d;
      b = c / bucket;
      off = bucket * d + c % bucket;
      out = counts + c;
    } else {
      b = 0;
      off = bucket * d + bucket;
      out = inertia;
    }
    const Acc* p = part + b * chunks * per + off;
    Acc tot = p[0];
    for (int64_t ch = 1; ch < chunks; ++ch) tot += p[ch * per];
    *out = tot;
  }
}

}  // namespace tsm2
