// The tiled assignment on sm_90a's warpgroup MMAs: the closest centroid of
// every row from X C^T, for f32 data in the TF32 mode and for bf16/f16, with
// the same items, splits, steps, ranking and results as KmeansAssignKernel
// (kmeans_assign.cuh; plan in tiled_plan.h, KmeansAssignWgPlanOf).
//
// Why a second kernel: the mma.sync tile issues every MMA, fragment load and
// copy from the same eight warps, which meet at a block barrier each step,
// so the tensor cores idle while the warps rank a tile's candidates (Nsight
// Compute: 0.43 instructions issued per scheduler per cycle, a fifth of the
// TF32 peak). Here the copies are tensor-map boxes issued by one producer
// thread, the products are asynchronous wgmma reading both operands from
// shared memory, and the consumers wait on mbarriers only: no block barrier
// after the start.
//
// Layout: two consumer warpgroups own 64 rows each of the block's 128-row X
// tile against all 128 centroids of a tile (m64n128, two sets of 64
// accumulators a thread); one warp of a third warpgroup produces, and that
// warpgroup gives its registers to the consumers. A ring slot is a C
// sub-tile (128 centroids x 128 bytes), the X sub-tile unless X is
// resident, and, in a tile's last step's slot, the tile's ||c||^2 (+Inf past
// k or not finite), which the producer's lanes write. Edges are the boxes'
// zero fill: rows past n, centroids past k and bytes past d arrive as zeros.
//
// Pipelining: a warpgroup ranks a tile while the next tile's first steps run
// on the tensor cores (KmeansWgConsumer::rank_at), holding the ranked tile's
// last slot for its norms until then. Ranking is the larger half of the
// consumers' instructions (Nsight Compute at 1e6 x 64, k = 4096, TF32: the
// tensor pipe busy 39% of the time, the ranking's instructions 34% of the
// warps' stall samples and the wgmma 9%).
//
// Ranking: each lane's 2 rows x 32 candidates take key = ||c||^2 - 2 x.c
// (one fma each); the tile's lowest key of a row is found by four
// interleaved chains of minima, and only where it beats the row's running best is the lowest
// index holding it searched for, so that a tile that improves no row costs
// two instructions a candidate. Equal keys keep the lower index, as in
// KmeansAssignKernel, so both kernels agree on ties.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only)

#include <cstdint>
#include <type_traits>

#include "ffi/common/cluster_pipe.cuh"
#include "ffi/common/wgmma.cuh"
#include "ffi/kmeans/kernels/kmeans_assign.cuh"
#include "ffi/kmeans/kernels/kmeans_assign_refine.cuh"
#include "ffi/kmeans/tiled_plan.h"

namespace tsm2 {

struct KmeansAssignWgArgs {
  KmeansAssignArgs a;  // stages, resident and res_slots are the warpgroup plan's
  CUtensorMap x_map, c_map;
  // With kGap (the refined f32 mode, kmeans_assign_refine.cuh), in place of
  // the distances: each row's second and third lowest keys less its lowest,
  // and the second's centroid.
  float *gap2, *gap3;
  int32_t* runner_up;
  const float* norms_max;  // the centroids' largest ||c||^2 (KmeansCsqKernel)
};

// Where a block's shared memory holds what (1,024-byte aligned `base`): the
// C ring, the X ring (streamed X) or the resident X copies, every sub-tile
// on a 1,024-byte boundary as the swizzle needs; then the norms' ring and
// the full and empty mbarriers.
struct KmeansWgSmem {
  char* c_ring;
  char* x_tiles;  // the X ring (stream) or the resident copies
  float* csq;     // [stages][kAssignCents]
  uint32_t full, empty;

  __device__ __forceinline__ KmeansWgSmem(char* base, const KmeansAssignArgs& a) {
    c_ring = base;
    x_tiles = c_ring + a.stages * kAssignWgSubTile;
    const int x_subs = a.resident ? a.res_slots * a.qd : a.stages;
    csq = reinterpret_cast<float*>(x_tiles + x_subs * kAssignWgSubTile);
    full = SmemAddr(csq + a.stages * kAssignCents);
    empty = full + 8 * a.stages;
  }
  // The X sub-tile of step (cursor, slot).
  __device__ __forceinline__ char* XSub(const KmeansAssignArgs& a, const KmeansAssignCursor& cur,
                                        int slot) const {
    return x_tiles + (a.resident ? cur.res * a.qd + cur.q : slot) * kAssignWgSubTile;
  }
};

// A tensor-map box of a 3-D map at (c0, c1, 0) into shared memory, completing
// on `bar`, with or without an L2 eviction hint.
__device__ __forceinline__ void KmeansTmaBox(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                             uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(0), "r"(bar)
      : "memory");
}

// The producer's warp: every step's boxes (lane 0) and the centroid tile's
// norms (all lanes) into the ring, `stages` steps ahead of the consumers.
template <typename T>
__device__ __forceinline__ void KmeansWgProduce(const KmeansAssignWgArgs& w,
                                                const KmeansWgSmem& sm) {
  const KmeansAssignArgs& a = w.a;
  const int lane = threadIdx.x % 32;
  constexpr int kElems = kAssignStepBytes / static_cast<int>(sizeof(T));
  if (lane == 0) {
    PrefetchTensorMap(&w.x_map);
    PrefetchTensorMap(&w.c_map);
  }
  KmeansAssignCursor cur;
  cur.Start(a);
  int slot = 0;
  uint32_t phase = 0;
  for (int64_t i = 0; cur.valid; ++i) {
    if (i >= a.stages) MbarWait(sm.empty + 8 * slot, phase ^ 1);
    if (cur.q == a.qd - 1) {  // the ranking reads a tile's norms from its last step's slot
      float* csq = sm.csq + slot * kAssignCents;
#pragma unroll
      for (int e = 0; e < kAssignCents / 32; ++e) {
        const int col = cur.j * kAssignCents + e * 32 + lane;
        const float v = col < a.k ? a.csq[col] : KmeansPosInf();
        csq[e * 32 + lane] = isfinite(v) ? v : KmeansPosInf();
      }
    }
    if (lane == 0) {
      const bool x_too = !a.resident || cur.j == cur.j0;
      const uint32_t bar = sm.full + 8 * slot;
      MbarArriveExpectTx(bar, kAssignWgSubTile * (x_too ? 2 : 1));
      KmeansTmaBox(SmemAddr(sm.c_ring + slot * kAssignWgSubTile), &w.c_map, cur.q * kElems,
                   cur.j * kAssignCents, bar);
      if (x_too) {
        KmeansTmaBox(SmemAddr(sm.XSub(a, cur, slot)), &w.x_map, cur.q * kElems,
                     static_cast<int>(cur.tile * kAssignRows), bar);
      }
    }
    MbarArrive(sm.full + 8 * slot);  // this lane's norms are written
    cur.Next(a);
    if (++slot == a.stages) slot = 0, phase ^= 1;
  }
}

// The keys of half h of a lane's finished centroid tile (acc holds x.c,
// then the keys, in place) and their minimum, found by four interleaved
// chains, so that ranking one set of accumulators needs few registers
// besides the two sets.
__device__ __forceinline__ float KmeansWgKeys(float (&acc)[64], const float* csq, int t, int h) {
  float m[4] = {KmeansPosInf(), KmeansPosInf(), KmeansPosInf(), KmeansPosInf()};
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float2 cs = *reinterpret_cast<const float2*>(csq + 8 * j + 2 * t);
    float& k0 = acc[4 * j + 2 * h];
    float& k1 = acc[4 * j + 2 * h + 1];
    k0 = fmaf(-2.0f, k0, cs.x);
    k1 = fmaf(-2.0f, k1, cs.y);
    m[(2 * j) % 4] = fminf(m[(2 * j) % 4], k0);
    m[(2 * j + 1) % 4] = fminf(m[(2 * j + 1) % 4], k1);
  }
  return fminf(fminf(m[0], m[1]), fminf(m[2], m[3]));
}

// Position p of half h of a lane's keys: candidate 8 (p / 2) + p % 2 of the
// lane's (centroid cbase + that + 2 t).
__device__ __forceinline__ float KmeansWgKeyAt(const float (&acc)[64], int h, int p) {
  return acc[4 * (p / 2) + 2 * h + p % 2];
}
__device__ __forceinline__ int32_t KmeansWgCentroid(int32_t cbase, int t, int p) {
  return cbase + 8 * (p / 2) + p % 2 + 2 * t;
}

// The lowest position of half h holding `low`.
__device__ __forceinline__ int KmeansWgLowestAt(const float (&acc)[64], int h, float low) {
  int at = 0;
#pragma unroll
  for (int p = 31; p >= 0; --p) {
    if (KmeansWgKeyAt(acc, h, p) == low) at = p;
  }
  return at;
}

// A lane's two rows of a finished centroid tile into their running best:
// the tile's lowest key of a row, and only where it beats the row's best,
// the lowest index holding it, so that a tile that improves no row costs two
// instructions a candidate. A NaN key (a row with a non-finite element:
// KmeansFixupKernel redoes it) never compares below the best.
__device__ __forceinline__ void KmeansWgRank(float (&acc)[64], const float* csq, int t,
                                             int32_t cbase, float (&best_key)[2],
                                             int32_t (&best_idx)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float low = KmeansWgKeys(acc, csq, t, h);
    if (low < best_key[h]) {
      best_key[h] = low;
      best_idx[h] = KmeansWgCentroid(cbase, t, KmeansWgLowestAt(acc, h, low));
    }
  }
}

// At most the second lowest key of half h (equal to it where no key is NaN,
// which fmaxf passes over): four interleaved chains of a running lowest and
// second lowest, three instructions a candidate without a position, so that a
// tile whose second key cannot matter costs no search for its position.
__device__ __forceinline__ float KmeansWgSecondLow(const float (&acc)[64], int h) {
  float m[4], s[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) m[c] = s[c] = KmeansPosInf();
#pragma unroll
  for (int p = 0; p < 32; ++p) {
    const float v = KmeansWgKeyAt(acc, h, p);
    s[p % 4] = fminf(s[p % 4], fmaxf(m[p % 4], v));
    m[p % 4] = fminf(m[p % 4], v);
  }
  const float lo01 = fminf(m[0], m[1]), hi01 = fmaxf(m[0], m[1]);
  const float lo23 = fminf(m[2], m[3]), hi23 = fmaxf(m[2], m[3]);
  const float second_of_lows = fminf(fmaxf(lo01, lo23), fminf(hi01, hi23));
  return fminf(second_of_lows, fminf(fminf(s[0], s[1]), fminf(s[2], s[3])));
}

// A row's three lowest keys, the two lowest with their centroids, in the
// order (key, index) of KmeansLexMin. The refined f32 mode ranks by TF32
// keys and needs to know which centroids lie close to the winner
// (kmeans_assign_refine.cuh).
struct KmeansTop3 {
  float k1, k2, k3;
  int32_t i1, i2;

  __device__ __forceinline__ void Clear() {
    k1 = k2 = k3 = KmeansPosInf();
    i1 = i2 = kAssignNoLabel;
  }
  __device__ __forceinline__ void Insert(float k, int32_t i) {
    if (k < k1 || (k == k1 && i < i1)) {
      k3 = k2;
      k2 = k1;
      i2 = i1;
      k1 = k;
      i1 = i;
    } else if (k < k2 || (k == k2 && i < i2)) {
      k3 = k2;
      k2 = k;
      i2 = i;
    } else {
      k3 = fminf(k3, k);
    }
  }
};

// KmeansWgRank keeping each row's three lowest keys, as far as the
// refinement needs them: keys `win` (at least its window) or more above the
// row's lowest can never win, and are left out. So a lane takes a tile's
// lowest key only where it lies within `win` of the row's best, over the
// row's four lanes and this tile (a lane's own best, of a quarter of the
// centroids, lies well above it), and below the lane's third; the tile's
// second and third keys only where the second passes the same test (first
// found by value alone, KmeansWgSecondLow, and by position only then). A warp
// runs a branch whenever one of its lanes does, and a row's best moves in
// most of its first tiles: the common branch is one search for the lowest
// key's position, as KmeansWgRank's. (Where a key left out was the row's
// true second or third, it and the one recorded both lie beyond the window,
// so the refinement decides alike.)
__device__ __forceinline__ void KmeansWgRankTop3(float (&acc)[64], const float* csq, int t,
                                                 int32_t cbase, KmeansTop3 (&top)[2],
                                                 const float (&win)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float low = KmeansWgKeys(acc, csq, t, h);
    float best = fminf(top[h].k1, low);
    best = fminf(best, __shfl_xor_sync(0xffffffffu, best, 1));
    best = fminf(best, __shfl_xor_sync(0xffffffffu, best, 2));
    const float edge = best + win[h];
    if (low < top[h].k3 && low < edge) {
      const int a1 = KmeansWgLowestAt(acc, h, low);
      top[h].Insert(low, KmeansWgCentroid(cbase, t, a1));
      const float second = KmeansWgSecondLow(acc, h);
      if (!(second < top[h].k3 && second < edge)) continue;
      float t2 = KmeansPosInf();
      int a2 = a1;  // in increasing position, the lowest index of equal keys
#pragma unroll
      for (int p = 0; p < 32; ++p) {
        const float v = KmeansWgKeyAt(acc, h, p);
        if (p != a1 && v < t2) t2 = v, a2 = p;
      }
      if (t2 < top[h].k3 && t2 < edge) {
        float t3 = KmeansPosInf();
#pragma unroll
        for (int p = 0; p < 32; ++p) {
          if (p != a1 && p != a2) t3 = fminf(t3, KmeansWgKeyAt(acc, h, p));
        }
        top[h].Insert(t2, KmeansWgCentroid(cbase, t, a2));
        top[h].Insert(t3, kAssignNoLabel);
      }
    }
  }
}

// The consumers: warpgroup wg's 64 rows of each item against its centroid
// tiles, then each row's (key, index) out. Two sets of accumulators take
// the centroid tiles in turn, and a tile is ranked only once the next
// tile's first steps are on the tensor cores (up to stages - 3 of them, so
// that the producer stays ahead), so that the ranking, the CUDA-core half of
// the work, overlaps the products. A step's slot is released once its
// products are done, except a tile's last step's slot, whose norms the
// ranking reads: it is released after the ranking.
template <typename T, bool kGap>
struct KmeansWgConsumer {
  const KmeansAssignWgArgs& w;
  const KmeansAssignArgs& a;
  const KmeansWgSmem& sm;
  int warp, wg, g, t, a_off;
  KmeansAssignCursor cur;
  int slot = 0;
  uint32_t phase = 0;
  int prev_slot = -1;  // the step before this one's slot, still to release (-1: none)
  int rank_at;         // the step of a tile after which the previous tile is ranked
  // The tile still to rank (in the other set of accumulators).
  bool pend = false, pend_first = false, pend_last = false;
  int pend_slot = 0;  // its last step's slot: the norms
  int32_t pend_cbase = 0;
  int64_t pend_tile = 0, pend_item = 0;
  float pend_xsq[2];  // the rows' ||x||^2, loaded a tile ahead of their write
  float best_key[2];
  int32_t best_idx[2];
  KmeansTop3 top[2];  // kGap: the rows' three lowest keys
  float win[2];       // kGap: the widest window of the rows' refinement
  float cn = 0;       // kGap: the centroids' largest |c|

  __device__ __forceinline__ KmeansWgConsumer(const KmeansAssignWgArgs& w_, const KmeansWgSmem& sm_)
      : w(w_), a(w_.a), sm(sm_) {
    const int tid = threadIdx.x;
    const int lane = tid % 32;
    warp = tid / 32;
    wg = warp / 4;
    g = lane / 4;
    t = lane % 4;
    a_off = wg * 64 * kAssignStepBytes;  // the warpgroup's rows of a sub-tile
    // Ranked once the next tile's products run, but early enough that the
    // producer keeps two slots of lead: the held slot and the steps issued
    // before the ranking are slots it cannot refill meanwhile.
    const int lag = a.qd < a.stages - 3 ? a.qd : a.stages - 3;
    rank_at = lag > 1 ? lag - 1 : 0;
    if constexpr (kGap) cn = sqrtf(w.norms_max[0]);
    cur.Start(a);
  }

  // Every consumer thread arrives once it is done with slot s (its MMAs have
  // read the sub-tiles and it has read the norms), so that each thread's
  // reads are ordered before the producer's next writes by its own arrival.
  __device__ __forceinline__ void Release(int s) { MbarArrive(sm.empty + 8 * s); }

  // The warpgroup's rows of a newly landed X sub-tile (f32), rounded to
  // nearest TF32 in place (the centroids come rounded), then made visible to
  // the MMAs' proxy before any of its warps multiplies.
  __device__ __forceinline__ void RoundX() {
    uint4* rows = reinterpret_cast<uint4*>(sm.XSub(a, cur, slot) + a_off);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint4 v = rows[(threadIdx.x % 128) + 128 * i];
      v.x = (v.x + 0x1000u) & 0xffffe000u;
      v.y = (v.y + 0x1000u) & 0xffffe000u;
      v.z = (v.z + 0x1000u) & 0xffffe000u;
      v.w = (v.w + 0x1000u) & 0xffffe000u;
      rows[(threadIdx.x % 128) + 128 * i] = v;
    }
    FenceProxyAsyncShared();
    // barrier.sync, not bar.sync (barrier.sync.aligned): a warp that has just left its
    // mbarrier spin need not be converged here, and an aligned barrier could then
    // release the warpgroup before every warp's rows are rounded.
    asm volatile("barrier.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
  }

  // The row of half h of this lane's rows in row tile `tile`.
  __device__ __forceinline__ int64_t Row(int64_t tile, int h) const {
    return tile * kAssignRows + wg * 64 + (warp % 4) * 16 + g + 8 * h;
  }

  // The four lanes of each row agree on the item's result; lane t == 0 writes it.
  __device__ __forceinline__ void WriteItem() {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int off = 1; off <= 2; off *= 2) {
        if constexpr (kGap) {
          const float o1 = __shfl_xor_sync(0xffffffffu, top[h].k1, off);
          const float o2 = __shfl_xor_sync(0xffffffffu, top[h].k2, off);
          const float o3 = __shfl_xor_sync(0xffffffffu, top[h].k3, off);
          const int32_t j1 = __shfl_xor_sync(0xffffffffu, top[h].i1, off);
          const int32_t j2 = __shfl_xor_sync(0xffffffffu, top[h].i2, off);
          top[h].Insert(o1, j1);
          top[h].Insert(o2, j2);
          top[h].Insert(o3, kAssignNoLabel);
        } else {
          const float ok = __shfl_xor_sync(0xffffffffu, best_key[h], off);
          const int32_t oi = __shfl_xor_sync(0xffffffffu, best_idx[h], off);
          KmeansLexMin(best_key[h], best_idx[h], ok, oi);
        }
      }
      const int64_t row = Row(pend_tile, h);
      if (t == 0 && row < a.n) {
        if constexpr (kGap) {  // one item per row tile (the launcher's condition)
          const KmeansTop3& b = top[h];
          const bool none = b.i1 == kAssignNoLabel;
          a.labels[row] = none ? 0 : b.i1;
          w.gap2[row] = none ? __int_as_float(0x7fc00000) : b.k2 - b.k1;
          w.gap3[row] = none ? __int_as_float(0x7fc00000) : b.k3 - b.k1;
          w.runner_up[row] = b.i2;
        } else if (a.splits == 1) {
          KmeansAssignWrite(pend_xsq[h], best_key[h], best_idx[h], a.labels + row, a.mind + row);
        } else {
          const int64_t at = (pend_item % a.splits) * a.n + row;
          a.split_key[at] = best_key[h];
          a.split_idx[at] = best_idx[h];
        }
      }
    }
  }

  // The pending tile's keys (in `acc`, whose products are done) into the
  // rows' running best, the item's result out after its last tile, and the
  // tile's last slot released.
  __device__ __forceinline__ void RankPending(float (&acc)[64]) {
    if (pend_first) {
      best_key[0] = best_key[1] = KmeansPosInf();
      best_idx[0] = best_idx[1] = kAssignNoLabel;
      if constexpr (kGap) {
        // The refinement's window with |x - x~| and |c - c~| at their most,
        // 2^-11 of |x| and |c| (and 1% for ||x||^2's rounding): never
        // narrower than the window it computes (NaN for a non-finite row,
        // which ranks nothing and is KmeansFixupKernel's).
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          top[h].Clear();
          const float xn = sqrtf(pend_xsq[h]);
          win[h] = 2.02f * KmeansTf32KeyBound(xn, 0x1p-11f * xn, cn, 0x1p-11f * cn, a.d);
        }
      }
    }
    WgmmaFenceOperands(acc);
    const float* csq = sm.csq + pend_slot * kAssignCents;
    if constexpr (kGap) {
      KmeansWgRankTop3(acc, csq, t, pend_cbase, top, win);
    } else {
      KmeansWgRank(acc, csq, t, pend_cbase, best_key, best_idx);
    }
    if (pend_last) WriteItem();
    Release(pend_slot);
    pend = false;
  }

  // A step of the tile in `acc` issued, and the step before it released
  // once its products are done (after the wait, all but this step's are),
  // except a tile's last step: its slot holds the norms, which the tile's
  // ranking reads.
  __device__ __forceinline__ void Step(float (&acc)[64]) {
    const uint32_t xa = SmemAddr(sm.XSub(a, cur, slot) + a_off);
    const uint32_t ca = SmemAddr(sm.c_ring + slot * kAssignWgSubTile);
    MbarWait(sm.full + 8 * slot, phase);
    if constexpr (std::is_same_v<T, float>) {
      if (!a.resident || cur.j == cur.j0) RoundX();
    }
    WgmmaFence();
    WgmmaFenceOperands(acc);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      WgmmaM64N128<T>(acc, WgmmaDescSw128(xa + 32 * ks), WgmmaDescSw128(ca + 32 * ks),
                      cur.q > 0 || ks > 0);
    }
    WgmmaCommit();
    WgmmaWait<1>();
    if (prev_slot >= 0) Release(prev_slot);
    prev_slot = cur.q == a.qd - 1 ? -1 : slot;
    cur.Next(a);
    if (++slot == a.stages) slot = 0, phase ^= 1;
  }

  // One centroid tile (its qd steps) into `acc`; `other` holds the previous
  // tile's products, ranked after step rank_at of this one. Two loops
  // around the ranking rather than a test in one loop: ptxas then sees that
  // the ranking reads finished accumulators, where a ranking inside the
  // loop of steps makes it wait for every MMA.
  __device__ __forceinline__ void Tile(float (&acc)[64], float (&other)[64]) {
    const int32_t cbase = cur.j * kAssignCents;
    const bool first = cur.j == cur.j0, last = cur.j == cur.j1 - 1;
    const int64_t tile = cur.tile, item = cur.item;
    float xsq[2] = {0.0f, 0.0f};
    // In flight while the tile runs: for the item's write (lane t == 0), or
    // with kGap for its ranking's window (every lane, from its first tile).
    if (kGap ? first : last && a.splits == 1 && t == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (Row(tile, h) < a.n) xsq[h] = a.x_sq[Row(tile, h)];
      }
    }
    do {
      Step(acc);
    } while (cur.valid && cur.q != 0 && cur.q <= rank_at);
    if (pend) RankPending(other);
    while (cur.valid && cur.q != 0) Step(acc);
    pend = true;
    pend_first = first;
    pend_last = last;
    pend_slot = slot == 0 ? a.stages - 1 : slot - 1;  // the tile's last step's
    pend_cbase = cbase;
    pend_tile = tile;
    pend_item = item;
    pend_xsq[0] = xsq[0];
    pend_xsq[1] = xsq[1];
  }

  __device__ __forceinline__ void Run() {
    float acc0[64], acc1[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc0[i] = acc1[i] = 0.0f;
    while (cur.valid) {
      Tile(acc0, acc1);
      if (!cur.valid) {
        WgmmaWait<0>();
        RankPending(acc0);
        break;
      }
      Tile(acc1, acc0);
      if (!cur.valid) {
        WgmmaWait<0>();
        RankPending(acc1);
      }
    }
  }
};

template <typename T, bool kGap = false>
__global__ void __launch_bounds__(kAssignWgThreads, 1)
    KmeansAssignWgKernel(const __grid_constant__ KmeansAssignWgArgs w) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) char smem_raw[];
  // Aligned by an offset from smem_raw rather than by integer casts, so that
  // the compiler still knows every pointer below is shared memory (LDS/STS,
  // not generic loads).
  char* base = smem_raw + ((1024 - SmemAddr(smem_raw) % 1024) % 1024);
  const KmeansAssignArgs& a = w.a;
  const KmeansWgSmem sm(base, a);
  if (threadIdx.x == 0) {
    for (int s = 0; s < a.stages; ++s) {
      MbarInit(sm.full + 8 * s, 33);  // the producer's 32 lanes and its expect-tx arrival
      MbarInit(sm.empty + 8 * s, kAssignWgConsumers);
    }
    MbarInitFence();
    FenceProxyAsyncShared();
  }
  __syncthreads();
  // The producer's warpgroup gives its registers to the consumers' (two sets
  // of 64 accumulators and the ranking): one warp of it issues the copies.
  if (threadIdx.x >= kAssignWgConsumers) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (threadIdx.x < kAssignWgConsumers + 32) KmeansWgProduce<T>(w, sm);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    KmeansWgConsumer<T, kGap>(w, sm).Run();
  }
#else
  __trap();  // the launcher picks it on sm_90a builds and GPUs only
#endif
}

}  // namespace tsm2
