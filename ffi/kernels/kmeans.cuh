// One Lloyd iteration of k-means in one pass over X: for every row, the
// closest centroid (label) and its squared distance, and per cluster the
// weighted sums of the rows and their total weight, plus the inertia.
//
// Structure (after tsm2.cuh's streaming kernel):
// - Persistent grid: block b owns a contiguous run of row tiles (R rows x all
//   d columns). Tiles stream through a cp.async ring of kStages shared-memory
//   stages together with the rows' weights; the centroids C (k x d, as
//   accumulators) are staged once per block.
// - Phase A, distances: each thread holds a 4-row x 4-centroid block of dot
//   products (register blocking: 8 shared-memory loads feed 16 FMAs per
//   element), and the d axis is split among `kGroups` thread groups whose
//   partials go to a reduction buffer. A warp covers up to 8 row blocks x 4
//   centroid blocks so that its X and C loads are broadcasts or
//   conflict-free.
//   Then all threads compute ||x||^2 of the tile's rows from the stage.
// - Phase B, assignment: one thread per (row, centroid) adds the groups'
//   partials in a fixed order, dist = max((||x||^2 - 2 x.c) + ||c||^2, 0)
//   (the jnp path's formula, NaN kept), and the KP threads of a row take the
//   argmin by shuffles, lowest index on ties and NaN first (as jnp.argmin).
// - Phase C, update, from the tile still in shared memory: the sums live in
//   registers for the whole run. Threads are (cluster set, 4-column group);
//   for each of its clusters a warp ballots the tile's rows with that label
//   and adds only those rows (w * x), so every element of X is added once,
//   with no shared-memory read-modify-write and no atomics.
// - End: each block writes its partial (sums, counts, inertia) to the
//   workspace; KmeansReduceKernel adds the partials over blocks in a fixed
//   order, so results are bitwise reproducible on one GPU (no float atomics).
#pragma once

#include <cstdint>

#include "ffi/kernels/common.cuh"
#include "ffi/kmeans_plan.h"

namespace tsm2 {

struct KmeansArgs {
  const void* x;    // [n, d] T
  const void* c;    // [k, d] T
  const void* w;    // [n] Acc
  int32_t* labels;  // [n]
  void* mind;       // [n] Acc
  void* partials;   // [blocks, k * d + k + 1] Acc
  int64_t n;
  int d, k;
  int64_t tiles;  // ceil(n / rows)
  int blocks;
  int nvd;         // 16-byte vectors covering d
  bool x_vec_ok;   // rows of X are 16-byte aligned: stage them with 16-byte cp.async
  KmeansLayout l;  // at run-time d (offsets); the launch allocates the variant's maximum
};

// First tile of block b: tiles are split evenly, in order, among the blocks.
__host__ __device__ inline int64_t KmeansTileBegin(int64_t b, int64_t tiles, int64_t blocks) {
  return b * tiles / blocks;
}

// Asynchronous copy of kBytes (4, 8 or 16) through L1; zero-fills when !valid.
template <int kBytes>
__device__ __forceinline__ void CpAsyncCa(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? kBytes : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(gmem), "n"(kBytes),
               "r"(src_bytes)
               : "memory");
}

// One element of X or w into shared memory: cp.async for 4- and 8-byte types,
// a plain copy for 2-byte ones (cp.async takes no 2-byte copies). `src` must
// be a valid address even when !valid (nothing is read then).
template <typename U>
__device__ __forceinline__ void StageElem(void* smem, const U* src, bool valid) {
  if constexpr (sizeof(U) == 4 || sizeof(U) == 8) {
    CpAsyncCa<static_cast<int>(sizeof(U))>(smem, src, valid);
  } else {
    *static_cast<U*>(smem) = valid ? *src : U(0.0f);
  }
}

__device__ __forceinline__ float KmeansInf(float) { return __int_as_float(0x7f800000); }
__device__ __forceinline__ double KmeansInf(double) {
  return __longlong_as_double(0x7ff0000000000000ll);
}
__device__ __forceinline__ float KmeansNaN(float) { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double KmeansNaN(double) {
  return __longlong_as_double(0x7ff8000000000000ll);
}

// Four consecutive elements of T from shared memory, as accumulators.
template <typename T>
__device__ __forceinline__ void Load4(const char* p, AccType<T> (&out)[4]) {
  T v[4];
  if constexpr (sizeof(T) == 8) {
    const uint4 a = *reinterpret_cast<const uint4*>(p);
    const uint4 b = *reinterpret_cast<const uint4*>(p + 16);
    memcpy(&v[0], &a, 16);
    memcpy(&v[2], &b, 16);
  } else if constexpr (sizeof(T) == 4) {
    const uint4 a = *reinterpret_cast<const uint4*>(p);
    memcpy(v, &a, 16);
  } else {
    const uint2 a = *reinterpret_cast<const uint2*>(p);
    memcpy(v, &a, 8);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) out[e] = ToAcc(v[e]);
}

template <typename T, int KP, int DC>
struct KmeansConfig {
  using Acc = AccType<T>;
  static constexpr KmeansLayout kL = KmeansVariantLayout(static_cast<int>(sizeof(T)), KP, DC);
  static constexpr int kThreads = kKmeansThreads, kStages = kKmeansStages;
  static constexpr int kRows = kL.rows, kGroups = kL.groups, kRedStride = kL.red_stride;
  static constexpr int kSmemBytes = kL.smem_bytes;
  // Phase A: row blocks rb + kRB * i and centroid blocks cb + kCB * j; inside
  // a warp kRL row blocks (consecutive rows) by kCL centroid blocks.
  static constexpr int kRB = kRows / 4, kCB = KP / 4, kCombos = kRB * kCB;
  static constexpr int kRL = kRB < 8 ? kRB : 8;
  static constexpr int kCL = kCB < 32 / kRL ? kCB : 32 / kRL;
  static constexpr int kActiveA = kCombos * kGroups;
  // Phase B: (row, centroid) pairs, centroid fastest, KP lanes per row.
  static constexpr int kPairs = kRows * KP;
  static constexpr int kPairSlots = (kPairs + kThreads - 1) / kThreads;
  // Phase C: kColGroups threads (4 columns each) per cluster set.
  static constexpr int kColGroups = DC / 4;
  static constexpr int kSets = kThreads / kColGroups;
  static constexpr int kCpw = KP / kSets > 0 ? KP / kSets : 1;  // clusters per set
  static constexpr int kLabPerLane = (kRows + 31) / 32;
  // ||x||^2: kXLanes threads per row (a power of two <= 32, so one warp's).
  static constexpr int kXLanes = kThreads / kRows;
  // Two blocks per SM overlap one block's barriers and phases with the
  // other's; that caps registers at 128, which the small-sum variants meet.
  static constexpr int kMinBlocks =
      KmeansSumRegs(KP, DC, static_cast<int>(sizeof(Acc))) <= 32 ? 2 : 1;

  static_assert(KmeansVariantFits(static_cast<int>(sizeof(T)), KP, DC), "variant does not fit");
  static_assert(kRows % 4 == 0 && KP % 4 == 0, "register blocks are 4 x 4");
  static_assert(kRB % kRL == 0 && kCB % kCL == 0, "warp shape must tile the blocks");
  static_assert(kActiveA <= kThreads, "too many (row, centroid) blocks for one block");
  static_assert(kPairs % 32 == 0 && 32 % KP == 0, "a row's KP lanes must sit in one warp");
  static_assert(kColGroups >= 32 && kColGroups <= kThreads, "cluster sets must be whole warps");
  static_assert(kXLanes >= 1 && kXLanes <= 32 && kThreads % kRows == 0, "||x||^2 lanes");
};

// Stages row tile `tile` (rows x row_elems, zero-padded) and its weights.
template <typename T, typename Cfg>
__device__ __forceinline__ void KmeansLoadTile(const KmeansArgs& p, int64_t tile, char* stage) {
  using Acc = typename Cfg::Acc;
  constexpr int kRows = Cfg::kRows, kVecT = kVec<T>;
  const T* x = static_cast<const T*>(p.x);
  const int64_t row0 = tile * kRows;
  const int rs = p.l.stage_row_bytes;
  // (r, v) walks q = tid, tid + 256, ... without a division per step.
  const int per_row = p.x_vec_ok ? p.l.row_elems / kVecT : p.l.row_elems;
  const int dr = Cfg::kThreads / per_row, dv = Cfg::kThreads % per_row;
  int r = threadIdx.x / per_row, v = threadIdx.x % per_row;
  if (p.x_vec_ok) {
    for (; r < kRows;) {
      const bool valid = row0 + r < p.n && v < p.nvd;
      const T* src = valid ? x + (row0 + r) * p.d + static_cast<int64_t>(v) * kVecT : x;
      CpAsync16(stage + r * rs + v * 16, src, valid);
      r += dr;
      v += dv;
      if (v >= per_row) {
        v -= per_row;
        ++r;
      }
    }
  } else {
    for (; r < kRows;) {
      const bool valid = row0 + r < p.n && v < p.d;
      StageElem<T>(stage + r * rs + v * static_cast<int>(sizeof(T)),
                   valid ? x + (row0 + r) * p.d + v : x, valid);
      r += dr;
      v += dv;
      if (v >= per_row) {
        v -= per_row;
        ++r;
      }
    }
  }
  Acc* w_stage = reinterpret_cast<Acc*>(stage + kRows * rs);
  const Acc* w = static_cast<const Acc*>(p.w);
  for (int q = threadIdx.x; q < kRows; q += Cfg::kThreads) {
    const bool valid = row0 + q < p.n;
    StageElem<Acc>(w_stage + q, valid ? w + row0 + q : w, valid);
  }
}

// (key, index) argmin over the KP lanes of a row: lower key, then lower index.
template <int KP, typename Acc>
__device__ __forceinline__ void ArgminLanes(Acc& key, int& idx) {
#pragma unroll
  for (int off = KP / 2; off > 0; off /= 2) {
    const Acc ok = __shfl_xor_sync(0xffffffffu, key, off);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, off);
    if (ok < key || (ok == key && oi < idx)) {
      key = ok;
      idx = oi;
    }
  }
}

// Sum over the KP lanes of a row. Every lane ends with the same value: at each
// step the two partners add the same two numbers.
template <int KP, typename Acc>
__device__ __forceinline__ Acc SumLanes(Acc v) {
#pragma unroll
  for (int off = KP / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

template <typename T, int KP, int DC, typename Cfg = KmeansConfig<T, KP, DC>>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    KmeansStepKernel(const __grid_constant__ KmeansArgs p) {
  using Acc = typename Cfg::Acc;
  constexpr int kRows = Cfg::kRows, kStages = Cfg::kStages, kVecT = kVec<T>;
  extern __shared__ __align__(16) char smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int rs = p.l.stage_row_bytes, cs_row = p.l.c_row_bytes;
  char* c_smem = smem + p.l.off_c;
  Acc* red = reinterpret_cast<Acc*>(smem + p.l.off_red);
  Acc* csq = reinterpret_cast<Acc*>(smem + p.l.off_csq);
  Acc* xsq_s = reinterpret_cast<Acc*>(smem + p.l.off_xsq);
  int* lab_s = reinterpret_cast<int*>(smem + p.l.off_lab);

  const int64_t t_begin = KmeansTileBegin(blockIdx.x, p.tiles, p.blocks);
  const int64_t count = KmeansTileBegin(blockIdx.x + 1, p.tiles, p.blocks) - t_begin;

  // Prologue: the first tiles' copies fly while the centroids are staged.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < count) KmeansLoadTile<T, Cfg>(p, t_begin + s, smem + s * p.l.stage_bytes);
    CpAsyncCommit();
  }
  for (int c = 0; c < KP; ++c) {
    const T* cg = static_cast<const T*>(p.c) + static_cast<int64_t>(c) * p.d;
    for (int e = tid; e < p.l.row_elems; e += Cfg::kThreads) {
      reinterpret_cast<Acc*>(c_smem + c * cs_row)[e] = c < p.k && e < p.d ? ToAcc(cg[e]) : Acc(0);
    }
  }
  __syncthreads();
  for (int c = warp; c < KP; c += Cfg::kThreads / 32) {
    const Acc* cr = reinterpret_cast<const Acc*>(c_smem + c * cs_row);
    Acc s = 0;
    for (int e = lane; e < p.l.row_elems; e += 32) s = fma(cr[e], cr[e], s);
    s = SumLanes<32>(s);
    if (lane == 0) csq[c] = s;
  }
  // csq is read after the loop's first barrier.

  // Phase A coordinates.
  const int qa = tid % Cfg::kCombos, g = tid / Cfg::kCombos;
  const int rest = qa / (Cfg::kRL * Cfg::kCL);
  const int rb = qa % Cfg::kRL + Cfg::kRL * (rest % (Cfg::kRB / Cfg::kRL));
  const int cb = (qa / Cfg::kRL) % Cfg::kCL + Cfg::kCL * (rest / (Cfg::kRB / Cfg::kRL));
  // Phase C coordinates.
  const int cgrp = tid % Cfg::kColGroups, cset = tid / Cfg::kColGroups;
  const bool col_ok = 4 * cgrp < p.l.row_elems;

  Acc sums[Cfg::kCpw][4];
  Acc cnt[Cfg::kCpw];
#pragma unroll
  for (int j = 0; j < Cfg::kCpw; ++j) {
    cnt[j] = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) sums[j][e] = 0;
  }
  Acc inertia = 0;

  for (int64_t it = 0; it < count; ++it) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of tile `it` have landed
    __syncthreads();             // everyone's have, and tile it-1's stage is free
    const int64_t ip = it + kStages - 1;
    if (ip < count) {
      KmeansLoadTile<T, Cfg>(p, t_begin + ip, smem + (ip % kStages) * p.l.stage_bytes);
    }
    CpAsyncCommit();
    const char* stage = smem + (it % kStages) * p.l.stage_bytes;
    const Acc* w_s = reinterpret_cast<const Acc*>(stage + kRows * rs);
    const int64_t row0 = (t_begin + it) * kRows;

    // ---- Phase A: partial dot products of this thread's 4 x 4 block over its d-vectors.
    if (tid < Cfg::kActiveA) {
      Acc dot[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) dot[i][j] = 0;
      }
      const char* xrow = stage + rb * rs;
      const char* crow = c_smem + cb * cs_row;
      for (int v = g; v < p.nvd; v += Cfg::kGroups) {
        Acc xv[4][kVecT];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          Unpack<T>(*reinterpret_cast<const uint4*>(xrow + i * Cfg::kRB * rs + v * 16), xv[i]);
        }
        Acc cv[4][kVecT];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          LoadSmemRow<kVecT>(reinterpret_cast<const Acc*>(crow + j * Cfg::kCB * cs_row) + v * kVecT,
                             cv[j]);
        }
#pragma unroll
        for (int e = 0; e < kVecT; ++e) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) dot[i][j] = fma(xv[i][e], cv[j][e], dot[i][j]);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          red[(g * kRows + rb + Cfg::kRB * i) * Cfg::kRedStride + cb + Cfg::kCB * j] = dot[i][j];
        }
      }
    }
    // ||x||^2 of each row, by kXLanes threads (all threads take part).
    {
      const int r = tid / Cfg::kXLanes, part = tid % Cfg::kXLanes;
      const char* xr = stage + r * rs;
      Acc xsq = 0;
      for (int v = part; v < p.nvd; v += Cfg::kXLanes) {
        Acc xv[kVecT];
        Unpack<T>(*reinterpret_cast<const uint4*>(xr + v * 16), xv);
#pragma unroll
        for (int e = 0; e < kVecT; ++e) xsq = fma(xv[e], xv[e], xsq);
      }
      xsq = SumLanes<Cfg::kXLanes>(xsq);
      if (part == 0) xsq_s[r] = xsq;
    }
    __syncthreads();

    // ---- Phase B: distances, argmin, labels and per-row outputs.
#pragma unroll
    for (int ps = 0; ps < Cfg::kPairSlots; ++ps) {
      const int pr = tid + ps * Cfg::kThreads;
      if (pr < Cfg::kPairs) {  // whole warps: kPairs is a multiple of 32
        const int r = pr / KP, c = pr % KP;
        Acc dot = 0;
#pragma unroll
        for (int gg = 0; gg < Cfg::kGroups; ++gg)
          dot += red[(gg * kRows + r) * Cfg::kRedStride + c];
        Acc dist = (xsq_s[r] - 2 * dot) + csq[c];
        dist = dist < 0 ? Acc(0) : dist;  // NaN stays NaN, as jnp.maximum
        // NaN ranks first (as jnp.argmin) and distances are >= 0, so -1 marks it.
        Acc key = c < p.k ? (dist != dist ? Acc(-1) : dist) : KmeansInf(Acc(0));
        int idx = c;
        ArgminLanes<KP>(key, idx);
        if (c == 0) {
          const int64_t row = row0 + r;
          const bool valid = row < p.n;
          const Acc md = key < 0 ? KmeansNaN(Acc(0)) : key;
          if (valid) {
            p.labels[row] = idx;
            static_cast<Acc*>(p.mind)[row] = md;
            inertia = fma(w_s[r], md, inertia);
          }
          lab_s[r] = valid ? idx : -1;
        }
      }
    }
    __syncthreads();

    // ---- Phase C: sums[label][:] += w * x, counts[label] += w, from registers.
    int my_lab[Cfg::kLabPerLane];
#pragma unroll
    for (int i = 0; i < Cfg::kLabPerLane; ++i) {
      const int rr = lane + 32 * i;
      my_lab[i] = rr < kRows ? lab_s[rr] : -1;
    }
#pragma unroll
    for (int j = 0; j < Cfg::kCpw; ++j) {
      const int c = cset * Cfg::kCpw + j;
#pragma unroll
      for (int i = 0; i < Cfg::kLabPerLane; ++i) {
        unsigned mask = __ballot_sync(0xffffffffu, my_lab[i] == c);  // warp-uniform
        while (mask != 0) {
          const int r = __ffs(mask) - 1 + 32 * i;
          mask &= mask - 1;
          const Acc wr = w_s[r];
          if (col_ok) {
            Acc xv[4];
            Load4<T>(stage + r * rs + 4 * cgrp * static_cast<int>(sizeof(T)), xv);
#pragma unroll
            for (int e = 0; e < 4; ++e) sums[j][e] = fma(wr, xv[e], sums[j][e]);
          }
          cnt[j] += wr;
        }
      }
    }
    // lab_s, red, xsq_s and this stage are next written after the next
    // iteration's first barrier.
  }
  CpAsyncWait<0>();

  // This block's partial: sums [k, d], counts [k], inertia.
  Acc* part = static_cast<Acc*>(p.partials) +
              static_cast<int64_t>(blockIdx.x) * KmeansPartialElems(p.d, p.k);
  const int64_t kd = static_cast<int64_t>(p.k) * p.d;
#pragma unroll
  for (int j = 0; j < Cfg::kCpw; ++j) {
    const int c = cset * Cfg::kCpw + j;
    if (c < p.k) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 4 * cgrp + e;
        if (col < p.d) part[static_cast<int64_t>(c) * p.d + col] = sums[j][e];
      }
      if (cgrp == 0) part[kd + c] = cnt[j];
    }
  }
  // Inertia: over each warp, then over the warps, in a fixed order. Nobody
  // reads `red` after the last phase-B barrier, so it is free here.
  inertia = SumLanes<32>(inertia);
  if (lane == 0) red[warp] = inertia;
  __syncthreads();
  if (tid == 0) {
    Acc total = 0;
    for (int w = 0; w < Cfg::kThreads / 32; ++w) total += red[w];
    part[kd + p.k] = total;
  }
}

// out[o] = sum over blocks b, in order, of partials[b][o]: 32 outputs per
// block, 8 slices of the blocks per output added in a fixed tree.
template <typename Acc>
__global__ void __launch_bounds__(256)
    KmeansReduceKernel(const Acc* __restrict__ part, int64_t elems, int blocks, int64_t kd, int k,
                       Acc* __restrict__ sums, Acc* __restrict__ counts,
                       Acc* __restrict__ inertia) {
  __shared__ Acc buf[8][32];
  const int lane = threadIdx.x % 32, s = threadIdx.x / 32;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  Acc acc = 0;
  if (o < elems) {
#pragma unroll 4
    for (int b = s; b < blocks; b += 8) acc += part[static_cast<int64_t>(b) * elems + o];
  }
  buf[s][lane] = acc;
  __syncthreads();
  if (s == 0 && o < elems) {
    Acc total = 0;
#pragma unroll
    for (int ss = 0; ss < 8; ++ss) total += buf[ss][lane];
    if (o < kd) {
      sums[o] = total;
    } else if (o < kd + k) {
      counts[o - kd] = total;
    } else {
      *inertia = total;
    }
  }
}

}  // namespace tsm2
