// The sorted path of the k-means sums (tiled_plan.h): per-cluster sums of
// w * x, total weights and the inertia for any k, in an order fixed by the
// plan alone, without floating-point atomics.
//
// 1. A stable LSD radix sort of the rows by label, 8 bits a pass (labels
//    outside [0, k) dropped on the first pass). Per pass: each warp counts
//    the digits of its chunk of rows (KmeansSortHistKernel), the counts are
//    scanned in (digit, chunk) order (two kernels; integer sums, exact in any
//    order), and each warp walks its chunk 32 rows at a time, ranking equal
//    digits by __match_any_sync, and scatters (label, row) to its digit's
//    cursor (KmeansSortScatterKernel). A stable sort has one result: the
//    chunks change the speed, never the sorted rows.
// 2. The sums over pieces of P consecutive sorted positions
//    (KmeansPieceKernel): a group of lanes owns a piece, each lane one
//    16-byte column chunk of the accumulators, and adds the piece's rows in
//    sorted order with fma(w, x, sum) from 0, a cluster at a time. A cluster
//    wholly inside the piece is written to the output; the one entering the
//    piece from before (slot 0) and the one leaving it after (slot 1) are
//    written as the piece's partials.
// 3. Merges (KmeansMergeKernel): level L adds the partials of kSumsMergeFan
//    consecutive units of level L - 1, in unit order, a cluster at a time,
//    from 0, with the same rule for what is final. Each level is a fixed
//    tree over positions, so a cluster of nearly all rows is added by many
//    lanes at once, never by one lane in turn.
// 4. The inertia: warp c adds w * mind over rows r0 + lane, r0 + lane + 32,
//    ... of chunk c by fma, then its lanes by butterfly (KmeansSortHistKernel
//    on the first pass); one block adds the chunks (KmeansSortedInertiaKernel).
//
// Whether a cluster crosses a unit's ends is read from the sorted labels on
// either side of the unit, so no table of cluster starts is kept. The CPU
// reference (cpu_tiled_handler.cc) follows the same order and gets the same
// bits. Empty clusters are zeroed before the pieces run.
#pragma once

#include <cstdint>
#include <cstring>

#include "ffi/common/kernel_utils.cuh"
#include "ffi/kmeans/tiled_plan.h"

namespace tsm2 {

// One pass of the sort: keys (labels) in, (key, row) out by one digit.
struct KmeansSortPass {
  const int32_t* keys_in;  // the labels (first pass) or the last pass's keys
  const int32_t* rows_in;  // nullptr on the first pass (row = position)
  int32_t* keys_out;
  int32_t* rows_out;
  int32_t* hist;   // [kSortDigits][chunks] counts, then their exclusive scan
  int32_t* tiles;  // [scan_tiles] the scan's tile sums
  int32_t* count;  // rows with a label in [0, k): written by the first pass's scan
  int64_t n;       // rows of the first pass
  int64_t chunks;
  int32_t k;
  int shift;
};

// Positions [r0, r1) of chunk c of this pass: all n rows on the first pass,
// the count sorted so far on later ones.
__device__ __forceinline__ int64_t KmeansPassRows(const KmeansSortPass& s) {
  return s.rows_in == nullptr ? s.n : static_cast<int64_t>(*s.count);
}

__device__ __forceinline__ int KmeansDigit(const KmeansSortPass& s, int32_t key) {
  return key >= 0 && key < s.k ? (key >> s.shift) & (kSortDigits - 1) : -1;
}

template <typename Acc>
__device__ __forceinline__ Acc WarpButterfly(Acc v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Warp w of block b counts the digits of chunk b * kSortWarps + w. On the
// first pass (inertia_part set) it also adds the chunk's inertia.
template <typename Acc>
__global__ void __launch_bounds__(kSortWarps * 32)
    KmeansSortHistKernel(const KmeansSortPass s, const Acc* __restrict__ w,
                         const Acc* __restrict__ mind, Acc* __restrict__ inertia_part) {
  __shared__ int32_t h[kSortWarps][kSortDigits];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t chunk = int64_t{blockIdx.x} * kSortWarps + warp;
  if (chunk >= s.chunks) return;  // no block-wide barrier below
  for (int g = lane; g < kSortDigits; g += 32) h[warp][g] = 0;
  __syncwarp();
  const int64_t total = KmeansPassRows(s);
  const int64_t r0 = KmeansChunkBegin(total, s.chunks, chunk);
  const int64_t r1 = KmeansChunkBegin(total, s.chunks, chunk + 1);
  Acc in = 0;
#pragma unroll 4
  for (int64_t r = r0 + lane; r < r1; r += 32) {
    const int g = KmeansDigit(s, s.keys_in[r]);
    if (g >= 0) atomicAdd(&h[warp][g], 1);
    if (inertia_part != nullptr) in = fma(w[r], mind[r], in);
  }
  if (inertia_part != nullptr) {
    in = WarpButterfly(in);
    if (lane == 0) inertia_part[chunk] = in;
  }
  __syncwarp();
  for (int g = lane; g < kSortDigits; g += 32) s.hist[int64_t{g} * s.chunks + chunk] = h[warp][g];
}

// The sum of a block's `v` (256 threads), in thread 0 (integers: any order).
__device__ __forceinline__ int32_t BlockSum256(int32_t v, int32_t* scratch) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  int32_t t = 0;
  if (threadIdx.x == 0) {
    for (int i = 0; i < 8; ++i) t += scratch[i];
  }
  __syncthreads();
  return t;
}

// Tile t's sum of the counters [t * kSortScanTile, (t + 1) * kSortScanTile).
__global__ void __launch_bounds__(256)
    KmeansSortScanTilesKernel(const int32_t* __restrict__ hist, int64_t elems,
                              int32_t* __restrict__ tiles) {
  __shared__ int32_t scratch[8];
  const int64_t t0 = int64_t{blockIdx.x} * kSortScanTile;
  int32_t v = 0;
  for (int i = threadIdx.x; i < kSortScanTile; i += 256) {
    if (t0 + i < elems) v += hist[t0 + i];
  }
  v = BlockSum256(v, scratch);
  if (threadIdx.x == 0) tiles[blockIdx.x] = v;
}

// The exclusive scan of the counters in place: tile t adds the sums of the
// tiles before it, then scans its own (8 consecutive counters a thread). The
// last tile writes the total where `count` is set.
__global__ void __launch_bounds__(256)
    KmeansSortScanDownKernel(int32_t* __restrict__ hist, int64_t elems,
                             const int32_t* __restrict__ tiles, int32_t* __restrict__ count) {
  __shared__ int32_t scratch[8];
  __shared__ int32_t warp_tot[8];
  __shared__ int32_t base_s;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  int32_t before = 0;
  for (int64_t t = tid; t < blockIdx.x; t += 256) before += tiles[t];
  before = BlockSum256(before, scratch);
  if (tid == 0) base_s = before;
  constexpr int kPer = kSortScanTile / 256;
  const int64_t e0 = int64_t{blockIdx.x} * kSortScanTile + tid * kPer;
  int32_t v[kPer];
  int32_t mine = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    v[i] = e0 + i < elems ? hist[e0 + i] : 0;
    mine += v[i];
  }
  int32_t incl = mine;  // inclusive scan over the warp's lanes
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const int32_t o = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += o;
  }
  if (lane == 31) warp_tot[warp] = incl;
  __syncthreads();
  int32_t run = base_s + incl - mine;
  for (int i = 0; i < warp; ++i) run += warp_tot[i];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (e0 + i < elems) hist[e0 + i] = run;
    run += v[i];
  }
  if (count != nullptr && blockIdx.x == gridDim.x - 1 && tid == 255) *count = run;
}

// Warp w of block b walks chunk b * kSortWarps + w 32 rows at a time, in row
// order: lanes of one digit take consecutive places from the digit's cursor
// (which starts at the scanned count of (digit, chunk)) in lane order.
__global__ void __launch_bounds__(kSortWarps * 32) KmeansSortScatterKernel(const KmeansSortPass s) {
  __shared__ int32_t cur[kSortWarps][kSortDigits];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t chunk = int64_t{blockIdx.x} * kSortWarps + warp;
  if (chunk >= s.chunks) return;  // no block-wide barrier below
  for (int g = lane; g < kSortDigits; g += 32) cur[warp][g] = s.hist[int64_t{g} * s.chunks + chunk];
  __syncwarp();
  const int64_t total = KmeansPassRows(s);
  const int64_t r0 = KmeansChunkBegin(total, s.chunks, chunk);
  const int64_t r1 = KmeansChunkBegin(total, s.chunks, chunk + 1);
  const unsigned below = (1u << lane) - 1u;
  constexpr int kAhead = 4;  // steps of 32 rows whose keys are loaded at once
  for (int64_t base = r0; base < r1; base += 32 * kAhead) {
    int32_t key[kAhead], row[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t r = base + u * 32 + lane;
      key[u] = -1;
      row[u] = 0;
      if (r < r1) {
        key[u] = s.keys_in[r];
        row[u] = s.rows_in != nullptr ? s.rows_in[r] : static_cast<int32_t>(r);
      }
    }
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int g = KmeansDigit(s, key[u]);
      const unsigned peers = __match_any_sync(0xffffffffu, g);
      const int rank = __popc(peers & below);
      const int32_t at = g >= 0 ? cur[warp][g] + rank : 0;
      __syncwarp();
      if (g >= 0) {
        if (rank == 0) cur[warp][g] = at + __popc(peers);
        s.keys_out[at] = key[u];
        s.rows_out[at] = row[u];
      }
      __syncwarp();
    }
  }
}

// ---------------------------------------------------------------- sums

struct KmeansSortedArgs {
  const void* x;        // [n, d] T
  const void* w;        // [n] Acc
  const int32_t* keys;  // [count] sorted labels
  const int32_t* rows;  // [count] their rows
  const int32_t* count;
  void* sums;                   // [k, d] Acc
  void* counts;                 // [k] Acc
  const void* in;               // merges: the partials of the level below
  void* out;                    // the partials of this level
  int64_t in_units, out_units;  // the levels' units (of the partial buffers)
  int64_t unit;                 // sorted positions of a unit of this level
  int64_t sub;                  // positions of a unit of the level below (merges)
  int64_t colblocks;
  int d, q, qb;  // q: 16-byte chunks of a row of accumulators; qb: lanes a unit
  bool x_vec;    // rows of whole chunks, X aligned: vector loads
};

// Unit and column chunk of this lane, or false where it has none.
__device__ __forceinline__ bool KmeansSortedLane(const KmeansSortedArgs& a, int64_t* u, int* q) {
  const int lane = threadIdx.x % 32;
  const int64_t gw = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int per = 32 / a.qb;  // units a warp takes
  const int64_t cb = gw % a.colblocks;
  *u = (gw / a.colblocks) * per + lane / a.qb;
  *q = static_cast<int>(cb * a.qb + lane % a.qb);
  return *q < a.q && lane / a.qb < per;
}

template <typename Acc, int kV>
__device__ __forceinline__ uint4 KmeansBits(const Acc (&acc)[kV]) {
  static_assert(kV * sizeof(Acc) == 16, "a 16-byte chunk of accumulators");
  uint4 v;
  memcpy(&v, acc, 16);
  return v;
}

// Writes the sums of cluster c (a unit's run from `head`/`tail` of its
// unit): the output where it is whole, else slot 0 (entered from before) or
// slot 1 (leaves after) of the unit's partials.
// Not inlined: a flush is rare (a cluster's end in a unit), and its copies
// in every step of the unrolled loops cost the registers of rows in flight.
// The sums come as their 16 bytes, by value: an array by reference would
// put the accumulators in local memory.
template <typename Acc, int kV>
__device__ __noinline__ void KmeansSortedFlush(const KmeansSortedArgs& a, int64_t u, int q,
                                               int32_t c, bool head, bool tail, uint4 bits,
                                               Acc cnt) {
  Acc acc[kV];
  memcpy(acc, &bits, 16);
  if (!head && !tail) {
    Acc* out = static_cast<Acc*>(a.sums) + int64_t{c} * a.d;
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      if (q * kV + e < a.d) out[q * kV + e] = acc[e];
    }
    if (q == 0) static_cast<Acc*>(a.counts)[c] = cnt;
    return;
  }
  const int64_t slot = 2 * u + (head ? 0 : 1);
  const int64_t row_acc = int64_t{a.q} * kV;
  Acc* part = static_cast<Acc*>(a.out);
  Acc* at = part + slot * row_acc + q * kV;
  *reinterpret_cast<uint4*>(at) = bits;
  if (q == 0) part[KmeansPartialWeightsOffset(a.out_units, row_acc) + slot] = cnt;
}

// The clusters of unit u's two slots (-1 where empty), for the merges.
template <typename Acc>
__device__ __forceinline__ void KmeansSortedIds(const KmeansSortedArgs& a, int64_t u, int32_t id0,
                                                int32_t id1) {
  const int64_t row_acc = int64_t{a.q} * (16 / static_cast<int>(sizeof(Acc)));
  int32_t* ids = reinterpret_cast<int32_t*>(
      static_cast<char*>(a.out) + KmeansPartialIdsOffset(a.out_units, row_acc, sizeof(Acc)));
  ids[2 * u] = id0;
  ids[2 * u + 1] = id1;
}

// kV elements of row `row` from column q * kV as accumulators: one 16-byte
// (f32, f64) or 8-byte (bf16, f16) load where rows are whole chunks and X is
// aligned (kVecX), else element by element, zero past d.
template <typename T, typename Acc, int kV, bool kVecX>
__device__ __forceinline__ void KmeansSortedLoad(const KmeansSortedArgs& a, int64_t row, int q,
                                                 Acc (&out)[kV]) {
  const T* x = static_cast<const T*>(a.x) + row * a.d;
  const int col0 = q * kV;
  if constexpr (kVecX) {
    T v[kV];
    if constexpr (sizeof(T) * kV == 16) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(x + col0));
      memcpy(v, &raw, 16);
    } else {
      const uint2 raw = __ldg(reinterpret_cast<const uint2*>(x + col0));
      memcpy(v, &raw, 8);
    }
#pragma unroll
    for (int e = 0; e < kV; ++e) out[e] = static_cast<Acc>(ToAcc(v[e]));
  } else {
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      out[e] = col0 + e < a.d ? static_cast<Acc>(ToAcc(__ldg(x + col0 + e))) : Acc(0);
    }
  }
}

// Sorted positions a lane has in flight in a piece: the X chunks of kAhead
// rows, and the labels and rows of the next kAhead (as many as 64 registers
// hold: 4 blocks of 256 threads an SM).
constexpr int kSumsSortedAhead = 4;

// Level 0: the lane group of piece u adds positions [u P, min(u P + P, count))
// in order, a cluster at a time. The loads are software-pipelined and never
// behind a branch: a step's rows (labels and row ids, clamped to the piece's
// last position) are loaded while the step before's X chunks are in flight,
// so that a lane waits for one round trip a step, not one per row.
template <typename T, typename Acc, bool kVecX>
__global__ void __launch_bounds__(kSumsSortedThreads, 4)
    KmeansPieceKernel(const __grid_constant__ KmeansSortedArgs a) {
  constexpr int kV = 16 / static_cast<int>(sizeof(Acc));
  constexpr int kAhead = kSumsSortedAhead;
  int64_t u;
  int q;
  if (!KmeansSortedLane(a, &u, &q)) return;
  const int64_t m = *a.count;
  const int64_t p0 = u * a.unit;
  if (p0 >= m) return;
  const int64_t p1 = p0 + a.unit < m ? p0 + a.unit : m;
  const int32_t before = p0 > 0 ? a.keys[p0 - 1] : -1;
  const int32_t after = p1 < m ? a.keys[p1] : -1;
  const Acc* w = static_cast<const Acc*>(a.w);
  int32_t key[kAhead], row[kAhead];
#pragma unroll
  for (int i = 0; i < kAhead; ++i) {
    const int64_t pos = p0 + i < p1 ? p0 + i : p1 - 1;
    key[i] = a.keys[pos];
    row[i] = a.rows[pos];
  }
  int32_t cur = key[0];
  const int32_t first = cur;
  bool head = cur == before;
  Acc acc[kV], cnt = 0;
#pragma unroll
  for (int e = 0; e < kV; ++e) acc[e] = 0;
  for (int64_t b = p0; b < p1; b += kAhead) {
    Acc wv[kAhead], xv[kAhead][kV];
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      wv[i] = w[row[i]];
      KmeansSortedLoad<T, Acc, kV, kVecX>(a, row[i], q, xv[i]);
    }
    int32_t next_key[kAhead], next_row[kAhead];
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      const int64_t pos = b + kAhead + i < p1 ? b + kAhead + i : p1 - 1;
      next_key[i] = a.keys[pos];
      next_row[i] = a.rows[pos];
    }
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      if (b + i >= p1) break;
      if (key[i] != cur) {
        KmeansSortedFlush<Acc, kV>(a, u, q, cur, head, false, KmeansBits(acc), cnt);
        cur = key[i];
        head = false;
#pragma unroll
        for (int e = 0; e < kV; ++e) acc[e] = 0;
        cnt = 0;
      }
#pragma unroll
      for (int e = 0; e < kV; ++e) acc[e] = fma(wv[i], xv[i][e], acc[e]);
      cnt += wv[i];
    }
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      key[i] = next_key[i];
      row[i] = next_row[i];
    }
  }
  const bool tail = cur == after;
  KmeansSortedFlush<Acc, kV>(a, u, q, cur, head, tail, KmeansBits(acc), cnt);
  if (q == 0) {
    const bool first_head = first == before;
    KmeansSortedIds<Acc>(a, u, first_head ? first : -1,
                         tail && !(first_head && first == cur) ? cur : -1);
  }
}

// Level L >= 1: the lane group of unit u adds the partials of units
// [u F, u F + F) of level L - 1 (F = kSumsMergeFan) in order, slot 0 then
// slot 1 of each, a cluster at a time.
template <typename Acc>
__global__ void __launch_bounds__(kSumsSortedThreads)
    KmeansMergeKernel(const __grid_constant__ KmeansSortedArgs a) {
  constexpr int kV = 16 / static_cast<int>(sizeof(Acc));
  int64_t u;
  int q;
  if (!KmeansSortedLane(a, &u, &q)) return;
  const int64_t m = *a.count;
  const int64_t g0 = u * a.unit;
  if (g0 >= m) return;
  const int64_t g1 = g0 + a.unit < m ? g0 + a.unit : m;
  const int32_t before = g0 > 0 ? a.keys[g0 - 1] : -1;
  const int32_t after = g1 < m ? a.keys[g1] : -1;
  const int64_t row_acc = int64_t{a.q} * kV;
  const Acc* in = static_cast<const Acc*>(a.in);
  const Acc* in_w = in + KmeansPartialWeightsOffset(a.in_units, row_acc);
  const int32_t* in_ids = reinterpret_cast<const int32_t*>(
      static_cast<const char*>(a.in) + KmeansPartialIdsOffset(a.in_units, row_acc, sizeof(Acc)));
  const int64_t j0 = u * kSumsMergeFan;
  const int64_t j_end = (m + a.sub - 1) / a.sub;
  const int64_t j1 = j0 + kSumsMergeFan < j_end ? j0 + kSumsMergeFan : j_end;
  int32_t cur = -1, first = -1;
  bool head = false;
  Acc acc[kV], cnt = 0;
#pragma unroll
  for (int e = 0; e < kV; ++e) acc[e] = 0;
  constexpr int kAhead = 8;  // slots in flight
  for (int64_t s0 = 2 * j0; s0 < 2 * j1; s0 += kAhead) {
    int32_t id[kAhead];
    Acc wv[kAhead], xv[kAhead][kV];
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {  // clamped to the last slot: no branch between loads
      const int64_t sl = s0 + i < 2 * j1 ? s0 + i : 2 * j1 - 1;
      id[i] = s0 + i < 2 * j1 ? in_ids[sl] : -1;
      wv[i] = in_w[sl];
      const uint4 raw = *reinterpret_cast<const uint4*>(in + sl * row_acc + q * kV);
      memcpy(xv[i], &raw, 16);
    }
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      if (id[i] < 0) continue;
      if (id[i] != cur) {
        if (cur >= 0) KmeansSortedFlush<Acc, kV>(a, u, q, cur, head, false, KmeansBits(acc), cnt);
        if (first < 0) first = id[i];
        cur = id[i];
        head = cur == before;
#pragma unroll
        for (int e = 0; e < kV; ++e) acc[e] = 0;
        cnt = 0;
      }
#pragma unroll
      for (int e = 0; e < kV; ++e) acc[e] += xv[i][e];
      cnt += wv[i];
    }
  }
  const bool tail = cur >= 0 && cur == after;
  if (cur >= 0) KmeansSortedFlush<Acc, kV>(a, u, q, cur, head, tail, KmeansBits(acc), cnt);
  if (q == 0) {
    const bool first_head = first >= 0 && first == before;
    KmeansSortedIds<Acc>(a, u, first_head ? first : -1,
                         tail && !(first_head && first == cur) ? cur : -1);
  }
}

// The inertia: thread t adds the chunks' partials t, t + 256, ... in order,
// each warp its lanes by butterfly, then thread 0 the warps in order.
template <typename Acc>
__global__ void __launch_bounds__(256)
    KmeansSortedInertiaKernel(const Acc* __restrict__ part, int64_t chunks,
                              Acc* __restrict__ inertia) {
  __shared__ Acc warp_in[8];
  Acc v = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += 256) v += part[c];
  v = WarpButterfly(v);
  if (threadIdx.x % 32 == 0) warp_in[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    Acc tot = warp_in[0];
    for (int i = 1; i < 8; ++i) tot += warp_in[i];
    *inertia = tot;
  }
}

}  // namespace tsm2
