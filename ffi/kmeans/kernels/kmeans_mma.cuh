// One Lloyd iteration of k-means for f32 rows of 4..256 elements on tensor
// cores: the same outputs as KmeansStepKernel (kmeans.cuh), from one pass
// over X.
//
// Why: the CUDA-core step issues ~265 instructions per row at d = 256,
// k = 16 (half of them FMAs, most of the rest the cross-lane reduction of
// the partial dots) and ran at 1.75 reads of X. Here both products are
// mma.sync m16n8k8 TF32 with f32 accuracy kept by splitting each operand in
// a high and a low TF32 part (x = hi + lo):
// - distances: C (centroids, M) x X^T (rows, N) over d (K) as
//   hi*hi + hi*lo + lo*hi (the lo*lo term is below f32 rounding);
// - sums: onehot(labels)^T (clusters, M) x (w * X) (columns, N) over the rows
//   (K); the one-hot is exact in TF32, so hi + lo of w * x is enough.
// The first needs a row's elements along K and the second along N, so X is
// staged in shared memory (cp.async, kStages tiles in flight) rather than
// kept in registers, and read twice from there.
//
// A tile of 64 or 32 rows (KmeansMmaConfig): row group r (rows 8r..8r+7)
// gets its distances from one warp, or from two warps each taking half of
// the chunk pairs, then labels go to shared memory (one barrier); then warp
// w takes columns w * DC / kWarps.. of every row for the sums, whose
// accumulators stay in registers for the whole run. Every sum is added in
// one fixed order: results are bitwise reproducible.
//
// Rows are stored with their 16-byte chunks XOR-swizzled (KmeansMmaSwizzle):
// both the distance reads (two rows x four chunks per quarter warp) and the
// sum reads (four rows x eight columns per warp) hit 32 distinct banks.
//
// Non-finite data: a NaN or Inf times a zero of the one-hot (or of a
// centroid's split) would poison other clusters. Rows whose ||x||^2 or
// w^2 ||x||^2 is not finite, and centroids whose ||c||^2 is not, take a
// CUDA-core path (exact f32 dots, the row zeroed in the tile and added to its
// own cluster from global memory), so the results follow the formula of
// kmeans.cuh in every case.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ffi/common/kernel_utils.cuh"
#include "ffi/common/tf32.cuh"
#include "ffi/kmeans/kernels/kmeans.cuh"
#include "ffi/kmeans/plan.h"

namespace tsm2 {

// Chunk q of row r sits at chunk q ^ KmeansMmaSwizzle(r): rows 2i and 2i+1
// land in opposite halves of a 128-byte line, and rows 0, 2, 4, 6 (and 1, 3,
// 5, 7) on four distinct chunk pairs.
__device__ __forceinline__ int KmeansMmaSwizzle(int r) {
  return ((r & 1) << 2) ^ (((r >> 1) & 3) << 1);
}

// Rows my_r, my_r + kStep, .. < kRows of a tile starting at global row row0
// into a stage of kRowFloats floats per row, chunks swizzled as above: this
// thread's 16-byte chunk ch, from column col of x (d columns, n rows). Rows
// past n and columns past d (col_ok false) are zero-filled.
//
// A whole tile (every tile but the last) takes straight-line copies: the
// source advances by a fixed stride, and the destinations, with kStep a
// multiple of 4, repeat the swizzle of the first two rows (KmeansMmaSwizzle
// depends on r % 8 only through r & 1 and (r >> 1) & 3), so they are two
// base addresses plus immediates. A per-row swizzle, bound test and select
// (a loop whose trip count depends on my_r does not unroll) took ~24% of the
// d = 256 step's instructions (ncu source counters, H200).
template <int kRows, int kStep, int kRowFloats>
__device__ __forceinline__ void KmeansCopyTile(char* st, const float* x, int64_t row0, int64_t n,
                                               int64_t d, int my_r, int ch, int col, bool col_ok) {
  static_assert(kStep % 4 == 0 && kRows % kStep == 0, "rows of a step share two swizzles");
  constexpr int kCopies = kRows / kStep;
  const float* src = x + (row0 + my_r) * d + col;
  const int64_t stride = kStep * d;
  char* dst[2] = {
      st + (my_r * kRowFloats + 4 * (ch ^ KmeansMmaSwizzle(my_r))) * 4,
      st + ((my_r + kStep) * kRowFloats + 4 * (ch ^ KmeansMmaSwizzle(my_r + kStep))) * 4};
  constexpr int kPairBytes = 2 * kStep * kRowFloats * 4;
  if (n - row0 >= kRows) {
    // Columns past d copy nothing from a valid address.
    const float* from = col_ok ? src : x;
    const int64_t step = col_ok ? stride : 0;
#pragma unroll
    for (int i = 0; i < kCopies; ++i, from += step) {
      CpAsync16(dst[i % 2] + (i / 2) * kPairBytes, from, col_ok);
    }
    return;
  }
  const int rows = static_cast<int>(n - row0);  // 0 < rows < kRows
#pragma unroll
  for (int i = 0; i < kCopies; ++i, src += stride) {
    const bool ok = col_ok && my_r + i * kStep < rows;
    CpAsync16(dst[i % 2] + (i / 2) * kPairBytes, ok ? src : x, ok);
  }
}

// (key, idx) <- (kc, c) if kc is smaller, or equal with a lower index:
// jnp.argmin's order (NaN keys come in as -1, KmeansKey).
__device__ __forceinline__ void KmeansTakeMin(float& key, int& idx, float kc, int c) {
  if (kc < key || (kc == key && c < idx)) {
    key = kc;
    idx = c;
  }
}

// The argmin over an mma fragment row's lanes, for R rows at once (their
// shuffles interleaved): the 8 lanes of a column (same t, g = 0..7) each
// hold the best of their centroids; afterwards all of them hold the best of
// all.
template <int R>
__device__ __forceinline__ void KmeansMinOverFragmentRows(float (&key)[R], int (&idx)[R]) {
#pragma unroll
  for (int off = 16; off >= 4; off /= 2) {
    float ko[R];
    int io[R];
#pragma unroll
    for (int j = 0; j < R; ++j) {
      ko[j] = __shfl_xor_sync(0xffffffffu, key[j], off);
      io[j] = __shfl_xor_sync(0xffffffffu, idx[j], off);
    }
#pragma unroll
    for (int j = 0; j < R; ++j) KmeansTakeMin(key[j], idx[j], ko[j], io[j]);
  }
}

// Calls f(acc, cluster, column) for each of this lane's sum accumulators
// (fragment rows 16 mt + g and + 8, fragment columns 2t and 2t + 1 of n-tile
// nt). Fragment column j of n-tile nt is column col_w + NT j + nt: a lane's
// B fragments of all n-tiles are NT neighbouring columns, one vector load.
template <int MT, int NT, typename F>
__device__ __forceinline__ void ForEachSum(float (&sacc)[MT][NT][4], int g, int t, int col_w,
                                           F&& f) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        f(sacc[mt][nt][q], 16 * mt + g + 8 * (q / 2), col_w + NT * (2 * t + q % 2) + nt);
      }
    }
  }
}

template <int DC, int MT, int ROWS = kKmeansMmaRows, int CHECK = 0>
struct KmeansMmaConfig {
  // Tiles of ROWS rows, 8 per row group in the distances, 8 warps.
  // - Rows of up to 128 elements (DC 64, 128), one 16-centroid tile: 64 rows,
  //   each warp a row group whole, two or three blocks per SM. A tile's fixed
  //   work (barriers, argmin, labels) outweighs its products there, so rows
  //   per barrier and blocks per SM set the speed. H200, n = 1e6, k = 16,
  //   against 32-row tiles of two warps per row group: d = 64 225 -> 170 us,
  //   d = 128 286 -> 239; three blocks of DC = 64 take 80 registers (16
  //   bytes spilled; four blocks of 32-row tiles spilled more and were slower).
  // - DC = 256, one tile: 32 rows, two warps per row group (each half of the
  //   chunk pairs), two blocks per SM, so that one block's sums run while the
  //   other's distances do (d = 256, k = 16: 456 against 493 us with 64 rows,
  //   H100; 16-row tiles at three blocks took 566). 64 rows take 16 warps.
  // - Two centroid tiles: 64 rows, one block per SM (175+ registers), two for
  //   DC = 64 (d = 64, k = 32: 303 -> 247 us; DC = 128 lost 7% with two).
  static constexpr int kRows = ROWS;
  static constexpr int kRowGroups = kRows / 8;
  static constexpr int kWarps = kRows == 32 || DC <= 128 || MT == 2 ? 8 : 16;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kSplitK = kWarps / kRowGroups;
  static constexpr int kBlocksPerSm = DC == 64      ? (MT == 1 ? 3 : 2)
                                      : DC == 128   ? (MT == 1 ? 2 : 1)
                                      : kRows == 32 ? 2
                                                    : 1;
  static constexpr int kKp = 16 * MT;     // centroids, padded to whole m16 tiles
  static constexpr int kPairs = DC / 16;  // 16-byte chunks per lane of a row
  static constexpr int kColsPerWarp = DC / kWarps;
  static constexpr int kNTiles = kColsPerWarp / 8;
  // Stages: as many as leave room for the blocks per SM above.
  static constexpr int kStages = DC == 256 ? 2 : kRows == 32 ? 4 : DC == 64 ? 3 : MT == 1 ? 2 : 4;
  static constexpr int kXBytes = kRows * DC * 4;
  static constexpr int kStageBytes = kXBytes + kRows * 4;  // X, then the rows' weights
  // Centroid fragments: [pair][half][mt][hi/lo][lane] of 16 bytes.
  static constexpr int kOffFrag = kStages * kStageBytes;
  static constexpr int kFragBytes = kPairs * 2 * MT * 2 * 32 * 16;
  static constexpr int kOffCsq = kOffFrag + kFragBytes;
  static constexpr int kOffLab = kOffCsq + kKp * 4;
  static constexpr int kOffBad = kOffLab + kRows * 4;  // bad-row bytes, one per row group
  static constexpr int kOffCnt = kOffBad + 16;
  static constexpr int kOffInert = kOffCnt + kWarps * kKp * 4;
  // Slow-path dots, [group][row][centroid]; one-hot fragments, [k-step][mt][lane] x 16 B;
  // split-K partials, [group][lane] (dots and ||x||^2 per lane).
  static constexpr int kOffFix = kOffInert + kWarps * 4;
  static constexpr int kOffOneHot = kOffFix + kRowGroups * 8 * kKp * 4;
  static constexpr int kOffXfer = kOffOneHot + kRowGroups * MT * 32 * 16;
  // Dots, ||x||^2 (and x . s in the checked step) per lane.
  static constexpr int kXfer = 4 * MT + 1 + (CHECK > 0 ? 1 : 0);
  // The checked step's s = sum_j c_j, [DC] (kmeans_row_check.cuh).
  static constexpr int kOffS = kOffXfer + (kSplitK > 1 ? kRowGroups * 32 * kXfer * 4 : 0);
  static constexpr int kSmemBytes = kOffS + (CHECK > 0 ? DC * 4 : 0);
  static_assert(kRows == 32 || kRows == 64, "tiles of 32 or 64 rows");
  static_assert(kRows == 64 || MT == 1, "32-row tiles take one centroid tile (registers)");
  static_assert(kSplitK == 1 || kSplitK == 2, "the split-K transfer adds one half");
  static_assert(DC == 64 || DC == 128 || DC == 256, "row classes of the tensor-core step");
  static_assert(kNTiles >= 1 && kColsPerWarp % 8 == 0, "whole n8 tiles per warp");
  static_assert(kSmemBytes <= kKmeansSmemLimit, "shared memory");
};

template <int DC, int MT, int ROWS = kKmeansMmaRows, int CHECK = 0,
          typename Cfg = KmeansMmaConfig<DC, MT, ROWS, CHECK>>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kBlocksPerSm)
    KmeansMmaStepKernel(const __grid_constant__ KmeansArgs p) {
  constexpr int kRows = Cfg::kRows, kKp = Cfg::kKp, kStages = Cfg::kStages;
  extern __shared__ __align__(16) char smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int rg = warp % Cfg::kRowGroups, kh = warp / Cfg::kRowGroups;  // row group, half of K
  const int g = lane / 4, t = lane % 4;                                // mma fragment coordinates
  const float* x = static_cast<const float*>(p.x);
  const float* cg = static_cast<const float*>(p.c);
  const float* wg = static_cast<const float*>(p.w);
  const int d = p.d, k = p.k;
  const int pairs = (d + 15) / 16;  // chunk pairs holding data

  uint4* frag = reinterpret_cast<uint4*>(smem + Cfg::kOffFrag);
  float* csq = reinterpret_cast<float*>(smem + Cfg::kOffCsq);
  int* lab_s = reinterpret_cast<int*>(smem + Cfg::kOffLab);
  uint8_t* bad_s = reinterpret_cast<uint8_t*>(smem + Cfg::kOffBad);
  uint4* oh_s = reinterpret_cast<uint4*>(smem + Cfg::kOffOneHot);
  if (tid < 16) bad_s[tid] = 0;  // read as 8 bytes below: the bytes of absent row groups stay 0

  // Centroid fragments: k-step (pair, half) takes logical column t from
  // physical column 16 pair + 4 t + 2 half and t + 4 from the next one, the
  // same order in which a lane reads its chunk of a row.
  for (int s = tid; s < Cfg::kPairs * 2 * MT * 32; s += Cfg::kThreads) {
    const int ln = s % 32, mt = (s / 32) % MT, half = (s / 32 / MT) % 2, pr = s / 32 / MT / 2;
    const int fg = ln / 4, ft = ln % 4;
    const int col = 16 * pr + 4 * ft + 2 * half;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int cent = 16 * mt + fg + 8 * (i % 2), cc = col + i / 2;
      v[i] = cent < k && cc < d ? cg[static_cast<int64_t>(cent) * d + cc] : 0.0f;
    }
    uint4 hi, lo;
    SplitTf32(v[0], hi.x, lo.x);
    SplitTf32(v[1], hi.y, lo.y);
    SplitTf32(v[2], hi.z, lo.z);
    SplitTf32(v[3], hi.w, lo.w);
    frag[(s / 32) * 64 + ln] = hi;
    frag[(s / 32) * 64 + 32 + ln] = lo;
  }
  for (int c = warp; c < kKp; c += Cfg::kWarps) {
    float s = 0;
    if (c < k) {
      for (int e = lane; e < d; e += 32)
        s = fma(cg[static_cast<int64_t>(c) * d + e], cg[static_cast<int64_t>(c) * d + e], s);
    }
    s = SumLanes<32>(s);
    if (lane == 0) csq[c] = s;
  }
  // Checked step: s = sum_j c_j in column order (a lane reads its row's
  // chunk 8 m + 4 e + t of s at the same offset, unswizzled).
  float* s_s = reinterpret_cast<float*>(smem + Cfg::kOffS);
  if constexpr (CHECK > 0) {
    for (int e = tid; e < DC; e += Cfg::kThreads) {
      float v = 0;
      for (int c = 0; c < k && e < d; ++c) v += cg[static_cast<int64_t>(c) * d + e];
      s_s[e] = v;
    }
  }

  const int64_t t_begin = blockIdx.x * p.tiles / gridDim.x;
  const int64_t t_end = (blockIdx.x + 1) * p.tiles / gridDim.x;
  auto stage_x = [&](int64_t i) {
    return reinterpret_cast<float*>(smem + (i % kStages) * Cfg::kStageBytes);
  };
  // Tile `tile` into stage i: rows past n and columns past d zero-filled.
  // A thread copies one 16-byte column chunk of every kRowStep-th row.
  constexpr int kChunks = DC / 4, kRowStep = Cfg::kThreads / kChunks;
  const int my_ch = tid % kChunks, my_r = tid / kChunks;
  static_assert(kRows % kRowStep == 0, "whole copy passes per tile");
  const bool my_col = 4 * my_ch < d;
  auto issue = [&](int64_t tile, int64_t i) {
    char* st = smem + (i % kStages) * Cfg::kStageBytes;
    KmeansCopyTile<kRows, kRowStep, DC>(st, x, tile * kRows, p.n, d, my_r, my_ch, 4 * my_ch,
                                        my_col);
    if (tid < kRows) {
      const int64_t row = tile * kRows + tid;
      CpAsync4(st + Cfg::kXBytes + tid * 4, row < p.n ? wg + row : wg, row < p.n);
    }
  };
  for (int s = 0; s < kStages - 1; ++s) {
    if (t_begin + s < t_end) issue(t_begin + s, s);
    CpAsyncCommit();
  }
  __syncthreads();    // fragments and csq
  uint32_t badc = 0;  // centroids with a non-finite ||c||^2
  for (int c = 0; c < k; ++c) badc |= isfinite(csq[c]) ? 0u : (1u << c);
  float csq_tot = 0, row_margin = 0;  // the checked step's
  int row_faults = 0;
  if constexpr (CHECK > 0) {
    for (int c = 0; c < k; ++c) csq_tot += csq[c];
  }

  float sacc[MT][Cfg::kNTiles][4] = {};  // this warp's columns of the sums
  float inertia = 0, cnt = 0;            // cnt: weight of cluster `lane`
  const int col_w = warp * Cfg::kColsPerWarp;

  for (int64_t tile = t_begin; tile < t_end; ++tile) {
    const int64_t i = tile - t_begin;
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // tile i landed; stage i - 1 and lab_s are free
    if (tile + kStages - 1 < t_end) issue(tile + kStages - 1, i + kStages - 1);
    CpAsyncCommit();
    float* xs = stage_x(i);
    float* ws = xs + kRows * DC;
    const int64_t row0 = tile * kRows;

    // Distances of rows 8 rg + n (n = g for B, 2t and 2t + 1 for D).
    const int rb = 8 * rg + g;
    const int swz = KmeansMmaSwizzle(rb);
    // Chunk 4 pr + t of the row sits at 4 (pr ^ (swz >> 2)) + (t ^ (swz & 3)):
    // pairs 2m and 2m + 1 read from two lane-constant pointers.
    const float* xa = xs + rb * DC + 4 * (t ^ (swz & 3)) + 16 * (swz >> 2);
    const float* xb = xs + rb * DC + 4 * (t ^ (swz & 3)) + 16 * ((swz >> 2) ^ 1);
    const uint4* fp = frag + lane;
    // Six accumulators per tile of centroids (three terms x two halves):
    // each mma waits for the previous one on its accumulator.
    float part[3][2][MT][4] = {};
    float xsq = 0, xsv = 0;  // xsv: x . s (checked step)
#pragma unroll 2
    for (int m = kh; m < (pairs + 1) / 2; m += Cfg::kSplitK) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float4 v = *reinterpret_cast<const float4*>((e == 0 ? xa : xb) + 32 * m);
        xsq = fma(v.x, v.x, xsq);
        xsq = fma(v.y, v.y, xsq);
        xsq = fma(v.z, v.z, xsq);
        xsq = fma(v.w, v.w, xsq);
        if constexpr (CHECK > 0) {
          const float4 sv = *reinterpret_cast<const float4*>(s_s + 32 * m + 16 * e + 4 * t);
          xsv = fma(v.x, sv.x, xsv);
          xsv = fma(v.y, sv.y, xsv);
          xsv = fma(v.z, sv.z, xsv);
          xsv = fma(v.w, sv.w, xsv);
        }
        uint32_t bh[4], bl[4];
        SplitTf32Trunc(v.x, bh[0], bl[0]);
        SplitTf32Trunc(v.y, bh[1], bl[1]);
        SplitTf32Trunc(v.z, bh[2], bl[2]);
        SplitTf32Trunc(v.w, bh[3], bl[3]);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const int f = (((2 * m + e) * 2 + half) * MT + mt) * 64;
            const uint4 h4 = fp[f], l4 = fp[f + 32];
            const uint32_t ah[4] = {h4.x, h4.y, h4.z, h4.w}, al[4] = {l4.x, l4.y, l4.z, l4.w};
            MmaTf32(part[0][half][mt], al, bh[2 * half], bh[2 * half + 1]);
            MmaTf32(part[1][half][mt], ah, bl[2 * half], bl[2 * half + 1]);
            MmaTf32(part[2][half][mt], ah, bh[2 * half], bh[2 * half + 1]);
          }
        }
      }
    }
    float acc[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        acc[mt][q] =
            (part[2][0][mt][q] + part[2][1][mt][q]) +
            ((part[0][0][mt][q] + part[0][1][mt][q]) + (part[1][0][mt][q] + part[1][1][mt][q]));
      }
    }
    if constexpr (Cfg::kSplitK > 1) {
      // The second half's partials to the first warp of the row group, added
      // in that order; a named barrier for the two warps only.
      float* xf = reinterpret_cast<float*>(smem + Cfg::kOffXfer) + (rg * 32 + lane) * Cfg::kXfer;
      if (kh == 1) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int q = 0; q < 4; ++q) xf[mt * 4 + q] = acc[mt][q];
        }
        xf[4 * MT] = xsq;
        if constexpr (CHECK > 0) xf[4 * MT + 1] = xsv;
      }
      // Not aligned (bar.sync): the warps arrive from a branch on kh.
      asm volatile("barrier.sync %0, 64;\n" ::"r"(1 + rg) : "memory");
      if (kh == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[mt][q] += xf[mt * 4 + q];
        }
        xsq += xf[4 * MT];
        if constexpr (CHECK > 0) xsv += xf[4 * MT + 1];
      }
    }
    if (kh == 0) {  // the rest of the distances: one warp per row group
      xsq += __shfl_xor_sync(0xffffffffu, xsq, 1);
      xsq += __shfl_xor_sync(0xffffffffu, xsq, 2);
      if constexpr (CHECK > 0) {
        xsv += __shfl_xor_sync(0xffffffffu, xsv, 1);
        xsv += __shfl_xor_sync(0xffffffffu, xsv, 2);
      }
      // Rows the tensor cores must not see: non-finite ||x||^2 or w^2 ||x||^2.
      const float wrow = ws[rb];
      const bool bad_row = !(isfinite(xsq) && isfinite(wrow * wrow * xsq));
      const uint32_t bad_lanes = __ballot_sync(0xffffffffu, bad_row && t == 0);
      uint32_t bad_rows = 0;  // bit r: row 8 rg + r
      if (bad_lanes != 0) {   // rare: kept off the usual path, which waits on it
#pragma unroll
        for (int r = 0; r < 8; ++r) bad_rows |= ((bad_lanes >> (4 * r)) & 1u) << r;
      }
      if ((bad_rows | badc) != 0) {
        // Exact f32 dots for every (row, centroid) pair a bad one touches,
        // through shared memory (a register picked by a run-time index would
        // move acc to local memory).
        float* fix = reinterpret_cast<float*>(smem + Cfg::kOffFix) + rg * 8 * kKp;
        for (int r = 0; r < 8; ++r) {
          for (int c = 0; c < k; ++c) {
            if (!((bad_rows >> r) & 1u) && !((badc >> c) & 1u)) continue;
            const int rr = 8 * rg + r, sw = KmeansMmaSwizzle(rr);
            float s = 0;
            for (int e = lane; e < d; e += 32) {
              const float xv = xs[rr * DC + 4 * ((e / 4) ^ sw) + e % 4];
              s = fma(xv, cg[static_cast<int64_t>(c) * d + e], s);
            }
            s = SumLanes<32>(s);
            if (lane == 0) fix[r * kKp + c] = s;
          }
        }
        __syncwarp();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int c = 16 * mt + g + 8 * (q / 2), r = 2 * t + q % 2;
            if (c < k && (((bad_rows >> r) & 1u) || ((badc >> c) & 1u))) {
              acc[mt][q] = fix[r * kKp + c];
            }
          }
        }
        __syncwarp();
        // Bad rows leave the tile; the sums take them from global memory.
        for (int r = 0; r < 8; ++r) {
          if ((bad_rows >> r) & 1u) {
            for (int e = lane; e < DC; e += 32) xs[(8 * rg + r) * DC + e] = 0.0f;
          }
        }
      }
      // Argmin of rows 2t + j over the lane's centroids, then over g; the
      // two rows' shuffle chains interleaved (the other warps wait for them
      // at the next barrier).
      float key[2];
      int idx[2];
      // The checked step's S, ||x||^2 and x . s per row.
      float dsum[2] = {}, xsq_row[2] = {}, xsv_row[2] = {};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float xs_row = __shfl_sync(0xffffffffu, xsq, 4 * (2 * t + j));
        if constexpr (CHECK > 0) {
          xsq_row[j] = xs_row;
          xsv_row[j] = __shfl_sync(0xffffffffu, xsv, 4 * (2 * t + j));
        }
        key[j] = KmeansInf(0.0f);
        idx[j] = kKp;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int c = 16 * mt + 8 * h + g;
            if constexpr (CHECK > 0) {
              float dist;
              const float kc = KmeansCheckedKey<CHECK>(xs_row, acc[mt][2 * h + j], csq[c], c < k,
                                                       row0 + 8 * rg + 2 * t + j, c, p.check, dist);
              dsum[j] += dist;
              KmeansTakeMin(key[j], idx[j], kc, c);
            } else {
              KmeansTakeMin(key[j], idx[j], KmeansKey(xs_row, acc[mt][2 * h + j], csq[c], c < k),
                            c);
            }
          }
        }
      }
      KmeansMinOverFragmentRows(key, idx);
      if constexpr (CHECK > 0) {
        // S over the 8 lanes (g) of each row, then its check by lane g = 0.
#pragma unroll
        for (int off = 4; off <= 16; off *= 2) {
          dsum[0] += __shfl_xor_sync(0xffffffffu, dsum[0], off);
          dsum[1] += __shfl_xor_sync(0xffffffffu, dsum[1], off);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int rt = 8 * rg + 2 * t + j;
          if (g == 0 && row0 + rt < p.n) {
            KmeansRowCheck(dsum[j], xsq_row[j], xsv_row[j], csq_tot, k, p.check, row_faults,
                           row_margin);
          }
        }
      }
      if (g == 0) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int rt = 8 * rg + 2 * t + j;
          const int64_t row = row0 + rt;
          lab_s[rt] = row < p.n ? idx[j] : -1;
          if (row < p.n) {
            p.labels[row] = idx[j];
            static_cast<float*>(p.mind)[row] = KmeansMind(key[j]);
            inertia = fma(ws[rt], KmeansMind(key[j]), inertia);
          }
        }
      }
      if (lane == 0) bad_s[rg] = static_cast<uint8_t>(bad_rows);
      __syncwarp();
      // The one-hot fragments of k-step `rg` of the sums (rows 8 rg + 2t
      // and + 1), once here rather than in every warp of the sums.
      {
        const int2 l2 = *reinterpret_cast<const int2*>(lab_s + 8 * rg + 2 * t);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int c = 16 * mt + g;
          oh_s[(rg * MT + mt) * 32 + lane] =
              make_uint4(l2.x == c ? 0x3f800000u : 0u, l2.x == c + 8 ? 0x3f800000u : 0u,
                         l2.y == c ? 0x3f800000u : 0u, l2.y == c + 8 ? 0x3f800000u : 0u);
        }
      }
      if (lane < kKp) {
#pragma unroll
        for (int r = 0; r < 8; ++r) cnt += lab_s[8 * rg + r] == lane ? ws[8 * rg + r] : 0.0f;
      }
      __syncwarp();
      if (lane < 8 && ((bad_rows >> lane) & 1u)) ws[8 * rg + lane] = 0.0f;  // NaN * 0 is NaN
    }
    __syncthreads();  // labels, bad rows and zeroed rows of every warp

    // Sums: k-step s covers rows 8s + 2t (logical t) and 8s + 2t + 1 (t + 4).
    if (col_w < d) {
      // Rows 2t and 2t + 1 of every k-step share their swizzle, so the
      // lane's columns (col_w + NT g .. + NT - 1, see ForEachSum) sit at a
      // lane-constant offset: one 16-byte (NT = 4) or 8-byte (NT = 2) load
      // per row gives the B fragments of every n-tile. A quarter (half) warp
      // reads two (one) chunks of four rows: distinct banks.
      constexpr int NT = Cfg::kNTiles;
      static_assert(NT == 1 || NT == 2 || NT == 4, "a lane's columns are one vector");
      using Vec = std::conditional_t<NT == 4, float4, std::conditional_t<NT == 2, float2, float>>;
      const int sw0 = KmeansMmaSwizzle(2 * t), sw1 = KmeansMmaSwizzle(2 * t + 1);
      const int col = col_w + NT * g, ch = col / 4;
      const Vec* xr0 = reinterpret_cast<const Vec*>(xs + 2 * t * DC + 4 * (ch ^ sw0) + col % 4);
      const Vec* xr1 =
          reinterpret_cast<const Vec*>(xs + (2 * t + 1) * DC + 4 * (ch ^ sw1) + col % 4);
#pragma unroll 4
      for (int s = 0; s < kRows / 8; ++s) {
        const float2 w2 = *reinterpret_cast<const float2*>(ws + 8 * s + 2 * t);
        uint32_t oh[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const uint4 o = oh_s[(s * MT + mt) * 32 + lane];
          oh[mt][0] = o.x;
          oh[mt][1] = o.y;
          oh[mt][2] = o.z;
          oh[mt][3] = o.w;
        }
        const Vec v0 = xr0[8 * s * DC / NT], v1 = xr1[8 * s * DC / NT];
        const float* e0 = reinterpret_cast<const float*>(&v0);
        const float* e1 = reinterpret_cast<const float*>(&v1);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          uint32_t h0, l0, h1, l1;
          SplitTf32Trunc(w2.x * e0[nt], h0, l0);
          SplitTf32Trunc(w2.y * e1[nt], h1, l1);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            MmaTf32(sacc[mt][nt], oh[mt], l0, l1);
            MmaTf32(sacc[mt][nt], oh[mt], h0, h1);
          }
        }
      }
      // Bad rows: w * x from global memory into their own cluster.
      const uint64_t bad_tile = *reinterpret_cast<const uint64_t*>(bad_s);
      if (bad_tile != 0) {
        for (int r = 0; r < kRows; ++r) {
          if (!((bad_tile >> r) & 1u)) continue;
          const int l = lab_s[r];
          if (l < 0) continue;
          const float* xr = x + (row0 + r) * d;
          const float wr = wg[row0 + r];  // the tile's copy was zeroed
          ForEachSum(sacc, g, t, col_w, [&](float& acc, int c, int col) {
            if (c == l && col < d) acc = fma(wr, xr[col], acc);
          });
        }
      }
    }
  }
  CpAsyncWait<0>();
  if constexpr (CHECK > 0) KmeansRowCheckFlush(p.check, row_faults, row_margin);

  // This block's partial: sums straight from the fragments, counts and
  // inertia added over the warps in order.
  float* part = static_cast<float*>(p.partials) + blockIdx.x * KmeansPartialElems(d, k);
  ForEachSum(sacc, g, t, col_w, [&](float& acc, int c, int col) {
    if (c < k && col < d) part[static_cast<int64_t>(c) * d + col] = acc;
  });
  float* cnt_s = reinterpret_cast<float*>(smem + Cfg::kOffCnt);
  float* inert_s = reinterpret_cast<float*>(smem + Cfg::kOffInert);
  inertia = SumLanes<32>(inertia);
  if (lane < kKp) cnt_s[warp * kKp + lane] = cnt;
  if (lane == 0) inert_s[warp] = inertia;
  __syncthreads();
  const int64_t kd = static_cast<int64_t>(k) * d;
  if (tid < k) {
    float tot = 0;
    for (int w = 0; w < Cfg::kWarps; ++w) tot += cnt_s[w * kKp + tid];
    part[kd + tid] = tot;
  }
  if (tid == 0) {
    float tot = 0;
    for (int w = 0; w < Cfg::kWarps; ++w) tot += inert_s[w];
    part[kd + k] = tot;
  }
}

}  // namespace tsm2
