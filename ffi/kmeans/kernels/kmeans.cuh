// One Lloyd iteration of k-means in one pass over X: for every row, the
// closest centroid (label) and its squared distance, and per cluster the
// weighted sums of the rows and their total weight, plus the inertia.
//
// Why this shape: the previous kernel staged X tiles in shared memory and
// register-blocked 4 rows x 4 centroids from there; shared memory traffic was
// ~8x the tile and three barrier-separated phases ran in series (Nsight: L1 /
// shared pipeline 85% busy, DRAM 22%). Here X goes from global memory straight
// into registers and is never staged:
// - A row is `nvd` vectors (4 elements, 2 for f64; plan.h). The plan
//   gives each row to `nwc` warps of one block, or of each of `cluster` blocks
//   of a thread-block cluster; lane g of a row's lanes owns vectors
//   rank * SV + g + lanes * jj (jj < J), so every load instruction of a warp
//   reads one contiguous run (512 bytes for f32).
// - Centroids, as accumulators, sit in shared memory in the same lane-owned
//   order (slot (c * J + jj) * lanes + g): a lane reads only its own 16-byte
//   slots, conflict-free and without any exchange. Each centroid load feeds
//   R rows (register blocking over rows, R <= 4): shared traffic is kp / R
//   bytes per byte of X instead of ~8.
// - Each lane accumulates kp partial dots per row over its elements (and
//   ||x||^2 from the same registers); a reduce-scatter butterfly
//   (kp/2 + ... + 1 shuffles, then log2(32 / kp) plain steps) leaves lane l
//   with the warp's dot for centroid l % kp.
// - local plans (one warp per row, d <= 128 / 256 vectors): dist and argmin
//   by shuffles right there, no barrier in the loop at all.
//   Otherwise the warps' partials go through shared memory (one barrier),
//   then per block (and through distributed shared memory over the cluster,
//   one cluster barrier), then labels (one more barrier). All blocks of a
//   cluster add the partials in one fixed order, so they agree on labels.
// - dist = max((||x||^2 - 2 x.c) + ||c||^2, 0) (the jnp path's formula, NaN
//   kept); argmin lowest index on ties and NaN first (as jnp.argmin).
// - Update from the same registers: the row's label is known to all its
//   lanes, each adds w * x into its own slots of its row group's sums in
//   shared memory (conflict-free read-modify-write, no atomics). A cluster
//   splits the d axis so that centroids and sums fit on chip: at d = 4096,
//   k = 16, f32 they are 256 KB each, more than one SM holds.
// - Rows of the next tile are loaded (16-byte non-allocating loads) before
//   the current tile is computed, so each warp keeps R * J vectors in flight.
// - End: row groups' sums added in a fixed order, one partial per block
//   (per cluster) to the workspace; KmeansReduceKernel adds the partials in a
//   fixed order, so results are bitwise reproducible on one GPU.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ffi/common/cluster.cuh"
#include "ffi/common/kernel_utils.cuh"
#include "ffi/kmeans/kernels/kmeans_row_check.cuh"
#include "ffi/kmeans/plan.h"

namespace tsm2 {

struct KmeansArgs {
  const void* x;    // [n, d] T
  const void* c;    // [k, d] T
  const void* w;    // [n] Acc
  int32_t* labels;  // [n]
  void* mind;       // [n] Acc
  void* partials;   // [owners, k * d + k + 1] Acc
  int64_t n;
  int d, k;
  int64_t tiles;          // ceil(n / plan.tile_rows)
  int64_t units;          // warps (local plans) or clusters walking the tiles
  int nvd;                // vectors covering d
  bool x_vec_ok;          // d is whole vectors and X is vector-aligned: vector loads
  KmeansCheckArgs check;  // read by the checked steps only (CHECK > 0)
};

__device__ __forceinline__ float KmeansInf(float) { return __int_as_float(0x7f800000); }
__device__ __forceinline__ double KmeansInf(double) {
  return __longlong_as_double(0x7ff0000000000000ll);
}
__device__ __forceinline__ float KmeansNaN(float) { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double KmeansNaN(double) {
  return __longlong_as_double(0x7ff8000000000000ll);
}

// Non-allocating loads: each row of X is read once.
__device__ __forceinline__ uint4 KmeansLoad(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 KmeansLoad(const uint2* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n"
               : "=r"(v.x), "=r"(v.y)
               : "l"(p));
  return v;
}

template <typename T, int KP, int CLS, int CHECK = 0>
struct KmeansConfig {
  using Acc = AccType<T>;
  // One vector of X in registers: 16 bytes, 8 for bf16/f16.
  using Raw = std::conditional_t<sizeof(T) == 2, uint2, uint4>;
  static constexpr KmeansPlan kP =
      KmeansChoosePlan(static_cast<int>(sizeof(T)), KP, CLS, CHECK > 0);
  static constexpr int kThreads = kKmeansThreads;
  static constexpr int kCl = kP.cluster, kNwc = kP.nwc, kJ = kP.j, kG = kP.groups, kR = kP.rows;
  static constexpr int kLanes = kP.lanes, kSlots = kP.slots, kSV = kLanes * kJ;
  static constexpr int kE = KmeansVecElems(static_cast<int>(sizeof(T)));  // elements per vector
  static constexpr bool kLocal = kP.local;
  static constexpr int kRB = kG * kR;  // rows of a block tile (cross-warp plans)
  // Partial dots and ||x||^2 per row (and x.s in the checked step).
  static constexpr int kRed = KP + 1 + (CHECK > 0 ? 1 : 0);
  static_assert(kP.ok, "variant has no plan");
  static_assert(kE * static_cast<int>(sizeof(Acc)) == 16, "a vector of accumulators is 16 bytes");
  static_assert(sizeof(Raw) == kE * sizeof(T), "a vector of X");
  static_assert(32 % KP == 0 || KP == 32, "a row's kp lanes sit in one warp");
};

// Vector jj of row `row` owned by lane g of block rank `rank`, as raw bits
// (zero past the row or past n).
template <typename T, typename Cfg>
__device__ __forceinline__ typename Cfg::Raw KmeansLoadVec(const KmeansArgs& p, int64_t row,
                                                           int v) {
  using Raw = typename Cfg::Raw;
  Raw out{};
  if (row >= p.n || v >= p.nvd) return out;
  const T* xr = static_cast<const T*>(p.x) + row * p.d;
  if (p.x_vec_ok) return KmeansLoad(reinterpret_cast<const Raw*>(xr) + v);
  T e[Cfg::kE];
#pragma unroll
  for (int i = 0; i < Cfg::kE; ++i) {
    const int col = v * Cfg::kE + i;
    e[i] = col < p.d ? xr[col] : T(0.0f);
  }
  memcpy(&out, e, sizeof out);
  return out;
}

template <typename T, typename Cfg>
__device__ __forceinline__ void KmeansLoadRows(const KmeansArgs& p, int64_t row0, int vec0,
                                               typename Cfg::Raw (&raw)[Cfg::kR][Cfg::kJ],
                                               AccType<T> (&w)[Cfg::kR]) {
  const AccType<T>* wp = static_cast<const AccType<T>*>(p.w);
#pragma unroll
  for (int r = 0; r < Cfg::kR; ++r) {
    const int64_t row = row0 + r;
#pragma unroll
    for (int jj = 0; jj < Cfg::kJ; ++jj) {
      raw[r][jj] = KmeansLoadVec<T, Cfg>(p, row, vec0 + jj * Cfg::kLanes);
    }
    w[r] = row < p.n ? wp[row] : AccType<T>(0);
  }
}

template <typename T, typename Raw>
__device__ __forceinline__ void KmeansUnpack(const Raw& raw,
                                             AccType<T> (&out)[sizeof(Raw) / sizeof(T)]) {
  constexpr int kN = sizeof(Raw) / sizeof(T);
  T v[kN];
  memcpy(v, &raw, sizeof raw);
#pragma unroll
  for (int i = 0; i < kN; ++i) out[i] = ToAcc(v[i]);
}

// (key, index) argmin over groups of KP lanes: lower key, then lower index.
// Both partners of a step see the same pair, so the group ends in agreement.
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

// Sum over groups of KP lanes; every lane ends with the same value (at each
// step the two partners add the same two numbers).
template <int KP, typename Acc>
__device__ __forceinline__ Acc SumLanes(Acc v) {
#pragma unroll
  for (int off = KP / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// One step of ReduceScatter: halves H..2H-1 and 0..H-1 of v[0..2H) fold into
// v[0..H), a lane keeping the half whose index bit H matches its lane bit H
// and sending the other half to lane ^ H. A template per step, so that every
// index is a constant and v stays in registers (loops left a stack frame).
template <int H, int N, typename Acc>
__device__ __forceinline__ void ReduceScatterStep(Acc (&v)[N], bool upper) {
#pragma unroll
  for (int i = 0; i < H; ++i) {
    const Acc send = upper ? v[i] : v[i + H];
    const Acc keep = upper ? v[i + H] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, H);
  }
  if constexpr (H > 1) ReduceScatterStep<H / 2>(v, ((threadIdx.x % 32) & (H / 2)) != 0);
}

// Reduce-scatter of v[0..KP) over the warp: returns, in lane l, the warp's
// sum of v[l % KP] (kp - 1 shuffles, then log2(32 / kp) plain steps).
template <int KP, typename Acc>
__device__ __forceinline__ Acc ReduceScatter(Acc (&v)[KP], int lane) {
  if constexpr (KP > 1) ReduceScatterStep<KP / 2>(v, (lane & (KP / 2)) != 0);
  Acc s = v[0];
#pragma unroll
  for (int o = KP; o < 32; o *= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

// dist = max((||x||^2 - 2 x.c) + ||c||^2, 0) as the argmin key: NaN ranks
// first (as jnp.argmin) and distances are >= 0, so -1 marks it; padded
// centroids (c >= k) never win.
template <typename Acc>
__device__ __forceinline__ Acc KmeansKeyOf(Acc dist, bool real) {
  dist = dist < 0 ? Acc(0) : dist;  // NaN stays NaN, as jnp.maximum
  return real ? (dist != dist ? Acc(-1) : dist) : KmeansInf(Acc(0));
}
template <typename Acc>
__device__ __forceinline__ Acc KmeansKey(Acc xsq, Acc dot, Acc csq, bool real) {
  return KmeansKeyOf(KmeansDist(xsq, dot, csq), real);
}

// The checked step's key of (row, centroid c): the distance, flipped where
// CHECK == 2 injects, added into the row's S (real centroids only).
template <int CHECK, typename Acc>
__device__ __forceinline__ Acc KmeansCheckedKey(Acc xsq, Acc dot, Acc csq, bool real, int64_t row,
                                                int c, const KmeansCheckArgs& ck, Acc& dist) {
  dist = KmeansDist(xsq, dot, csq);
  if constexpr (CHECK == 2) {
    const KmeansInjection in = *ck.inject;
    if (in.active != 0 && row == in.row && c == in.centroid) dist = KmeansFlipBit(dist, in.bit);
  }
  const Acc key = KmeansKeyOf(dist, real);
  dist = real ? dist : Acc(0);
  return key;
}

template <typename Acc>
__device__ __forceinline__ Acc KmeansMind(Acc key) {
  return key < 0 ? KmeansNaN(Acc(0)) : key;
}

template <int N, typename Acc>
__device__ __forceinline__ void LoadSlot(const uint4* s, Acc (&out)[N]) {
  const uint4 q = *s;
  memcpy(out, &q, 16);
}

template <typename T, int KP, int CLS, int CHECK = 0,
          typename Cfg = KmeansConfig<T, KP, CLS, CHECK>>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    KmeansStepKernel(const __grid_constant__ KmeansArgs p) {
  using Acc = typename Cfg::Acc;
  using Raw = typename Cfg::Raw;
  constexpr int kR = Cfg::kR, kJ = Cfg::kJ, kE = Cfg::kE, kG = Cfg::kG, kNwc = Cfg::kNwc;
  constexpr int kCl = Cfg::kCl, kLanes = Cfg::kLanes, kSlots = Cfg::kSlots, kRed = Cfg::kRed;
  constexpr KmeansPlan kP = Cfg::kP;
  extern __shared__ __align__(16) char smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int rg = warp / kNwc, wr = warp % kNwc;
  const int g = wr * 32 + lane;  // lane among the row's lanes of this block
  int rank = 0;
  if constexpr (kCl > 1) rank = ClusterBlockRank();
  const int vec0 = rank * Cfg::kSV + g;
  const int64_t owner = blockIdx.x / kCl;

  uint4* cent = reinterpret_cast<uint4*>(smem);
  uint4* sums_all = reinterpret_cast<uint4*>(smem + kP.off_sums);
  uint4* sums = sums_all + rg * kSlots;
  Acc* csq = reinterpret_cast<Acc*>(smem + kP.off_csq);

  // Centroids (this rank's vectors, lane-owned order) and zero sums.
  const T* cg = static_cast<const T*>(p.c);
  for (int s = tid; s < kSlots; s += Cfg::kThreads) {
    const int gg = s % kLanes, cj = s / kLanes, jj = cj % kJ, c = cj / kJ;
    const int v = rank * Cfg::kSV + gg + jj * kLanes;
    Acc vals[kE];
#pragma unroll
    for (int i = 0; i < kE; ++i) {
      const int col = v * kE + i;
      vals[i] = c < p.k && col < p.d ? ToAcc(cg[static_cast<int64_t>(c) * p.d + col]) : Acc(0);
    }
    uint4 q;
    memcpy(&q, vals, 16);
    cent[s] = q;
  }
  for (int s = tid; s < kG * kSlots; s += Cfg::kThreads) sums_all[s] = make_uint4(0, 0, 0, 0);
  for (int c = warp; c < KP; c += kKmeansWarps) {
    Acc s = 0;
    if (c < p.k) {
      for (int e = lane; e < p.d; e += 32) {
        const Acc v = ToAcc(cg[static_cast<int64_t>(c) * p.d + e]);
        s = fma(v, v, s);
      }
    }
    s = SumLanes<32>(s);
    if (lane == 0) csq[c] = s;
  }
  __syncthreads();

  // Checked step: this lane's elements of s = sum_j c_j, sum_j ||c_j||^2,
  // and the rows that failed so far.
  Acc sv[kJ][kE];
  Acc csq_tot = 0;
  int row_faults = 0;
  float row_margin = 0;
  if constexpr (CHECK > 0) {
#pragma unroll
    for (int jj = 0; jj < kJ; ++jj) {
#pragma unroll
      for (int e = 0; e < kE; ++e) sv[jj][e] = 0;
      for (int c = 0; c < p.k; ++c) {
        Acc cv[kE];
        LoadSlot(&cent[(c * kJ + jj) * kLanes + g], cv);
#pragma unroll
        for (int e = 0; e < kE; ++e) sv[jj][e] += cv[e];
      }
    }
    for (int c = 0; c < p.k; ++c) csq_tot += csq[c];
  }

  Acc inertia = 0, cnt = 0;  // cnt: weight of cluster `lane` (rank 0, wr 0)
  const int64_t unit = kP.local ? static_cast<int64_t>(blockIdx.x) * kKmeansWarps + warp : owner;
  const int64_t t_begin = unit * p.tiles / p.units, t_end = (unit + 1) * p.tiles / p.units;
  const int64_t row_off = kP.local ? 0 : static_cast<int64_t>(rg) * kR;

  Raw nraw[kR][kJ];
  Acc nw[kR];
  if (t_begin < t_end) {
    KmeansLoadRows<T, Cfg>(p, t_begin * kP.tile_rows + row_off, vec0, nraw, nw);
  }
  for (int64_t t = t_begin; t < t_end; ++t) {
    const int64_t row0 = t * kP.tile_rows + row_off;
    Acc xa[kR][kJ][kE];
    Acc wt[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      wt[r] = nw[r];
#pragma unroll
      for (int jj = 0; jj < kJ; ++jj) KmeansUnpack<T>(nraw[r][jj], xa[r][jj]);
    }
    if (t + 1 < t_end) KmeansLoadRows<T, Cfg>(p, row0 + kP.tile_rows, vec0, nraw, nw);

    // Partial dots over this lane's elements, and ||x||^2.
    Acc part[kR][KP];
    Acc xsq[kR], xs[kR];  // xs: x . s (checked step)
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      xsq[r] = 0;
      xs[r] = 0;
#pragma unroll
      for (int c = 0; c < KP; ++c) part[r][c] = 0;
#pragma unroll
      for (int jj = 0; jj < kJ; ++jj) {
#pragma unroll
        for (int e = 0; e < kE; ++e) {
          xsq[r] = fma(xa[r][jj][e], xa[r][jj][e], xsq[r]);
          if constexpr (CHECK > 0) xs[r] = fma(xa[r][jj][e], sv[jj][e], xs[r]);
        }
      }
    }
#pragma unroll
    for (int c = 0; c < KP; ++c) {
      Acc cv[kJ][kE];
#pragma unroll
      for (int jj = 0; jj < kJ; ++jj) LoadSlot(&cent[(c * kJ + jj) * kLanes + g], cv[jj]);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
#pragma unroll
        for (int jj = 0; jj < kJ; ++jj) {
#pragma unroll
          for (int e = 0; e < kE; ++e) part[r][c] = fma(xa[r][jj][e], cv[jj][e], part[r][c]);
        }
      }
    }
    Acc dot[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      dot[r] = ReduceScatter<KP>(part[r], lane);
      xsq[r] = SumLanes<32>(xsq[r]);
      if constexpr (CHECK > 0) xs[r] = SumLanes<32>(xs[r]);
    }

    int lab[kR];
    if constexpr (Cfg::kLocal) {
      const int c = lane % KP;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const int64_t row = row0 + r;
        Acc key;
        if constexpr (CHECK > 0) {
          Acc dist;
          key = KmeansCheckedKey<CHECK>(xsq[r], dot[r], csq[c], c < p.k, row, c, p.check, dist);
          const Acc S = SumLanes<KP>(dist);
          if (lane == r && row < p.n) {
            KmeansRowCheck(S, xsq[r], xs[r], csq_tot, p.k, p.check, row_faults, row_margin);
          }
        } else {
          key = KmeansKey(xsq[r], dot[r], csq[c], c < p.k);
        }
        int idx = c;
        ArgminLanes<KP>(key, idx);
        lab[r] = row < p.n ? idx : -1;
        if (lane == r && row < p.n) {
          p.labels[row] = idx;
          static_cast<Acc*>(p.mind)[row] = KmeansMind(key);
        }
        if (lane == 0 && row < p.n) inertia = fma(wt[r], KmeansMind(key), inertia);
      }
    } else {
      Acc* redw = reinterpret_cast<Acc*>(smem + kP.off_redw);
      Acc* redb = reinterpret_cast<Acc*>(smem + kP.off_redb) + (t & 1) * Cfg::kRB * kRed;
      int* lab_s = reinterpret_cast<int*>(smem + kP.off_lab);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        Acc* q = redw + ((rg * kR + r) * kNwc + wr) * kRed;
        if (lane < KP) q[lane] = dot[r];
        if (lane == 0) q[KP] = xsq[r];
        if constexpr (CHECK > 0) {
          if (lane == 0) q[KP + 1] = xs[r];
        }
      }
      __syncthreads();
      // This block's share: the row group's warps added in order.
      for (int q = tid; q < Cfg::kRB * kRed; q += Cfg::kThreads) {
        const int rb = q / kRed, s = q % kRed;
        Acc sum = 0;
#pragma unroll
        for (int w = 0; w < kNwc; ++w) sum += redw[(rb * kNwc + w) * kRed + s];
        redb[q] = sum;
      }
      // redb is double-buffered: a peer may still read the previous tile's
      // until it reaches the next cluster barrier.
      if constexpr (kCl > 1) {
        ClusterSync();
      } else {
        __syncthreads();
      }
      // Labels: KP lanes per row, the cluster's shares added in rank order
      // (identical in every block of the cluster).
      const int64_t tile0 = t * kP.tile_rows;
      for (int base = 0; base < Cfg::kRB * KP; base += Cfg::kThreads) {
        const int q = base + tid;
        const bool active = q < Cfg::kRB * KP;
        const int rb = active ? q / KP : 0, c = q % KP;
        Acc d_sum = 0, x_sum = 0, s_sum = 0;
#pragma unroll
        for (int cr = 0; cr < kCl; ++cr) {
          const Acc* src = redb;
          if constexpr (kCl > 1) src = ClusterMapShared(redb, cr);
          d_sum += src[rb * kRed + c];
          x_sum += src[rb * kRed + KP];
          if constexpr (CHECK > 0) s_sum += src[rb * kRed + KP + 1];
        }
        Acc key;
        if constexpr (CHECK > 0) {
          const int64_t row = tile0 + rb;
          Acc dist;
          key = KmeansCheckedKey<CHECK>(x_sum, d_sum, csq[c], c < p.k, row, c, p.check, dist);
          const Acc S = SumLanes<KP>(dist);
          // Every block of a cluster sees the same row: rank 0 counts it.
          if (active && c == 0 && rank == 0 && row < p.n) {
            KmeansRowCheck(S, x_sum, s_sum, csq_tot, p.k, p.check, row_faults, row_margin);
          }
        } else {
          key = KmeansKey(x_sum, d_sum, csq[c], c < p.k);
        }
        int idx = c;
        ArgminLanes<KP>(key, idx);
        if (active && c == 0) {
          const int64_t row = tile0 + rb;
          lab_s[rb] = row < p.n ? idx : -1;
          if (rank == 0 && row < p.n) {
            p.labels[row] = idx;
            static_cast<Acc*>(p.mind)[row] = KmeansMind(key);
            inertia = fma(static_cast<const Acc*>(p.w)[row], KmeansMind(key), inertia);
          }
        }
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kR; ++r) lab[r] = lab_s[rg * kR + r];
      // lab_s and redw are next written after the next tile's first barrier.
    }

    // Update: sums[label] += w * x over this lane's slots; counts by lane.
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int l = lab[r];  // uniform over the warp
      if (l < 0) continue;
#pragma unroll
      for (int jj = 0; jj < kJ; ++jj) {
        uint4* s = &sums[(l * kJ + jj) * kLanes + g];
        Acc sv[kE];
        LoadSlot(s, sv);
#pragma unroll
        for (int e = 0; e < kE; ++e) sv[e] = fma(wt[r], xa[r][jj][e], sv[e]);
        uint4 q;
        memcpy(&q, sv, 16);
        *s = q;
      }
      if (lane == l) cnt += wt[r];
    }
  }

  // This block's partial: row groups' sums in order; counts and inertia from
  // rank 0 (the other ranks saw the same rows).
  Acc* cnt_s = reinterpret_cast<Acc*>(smem + kP.off_cnt);
  Acc* inert_s = reinterpret_cast<Acc*>(smem + kP.off_inert);
  inertia = SumLanes<32>(inertia);
  if constexpr (CHECK > 0) KmeansRowCheckFlush(p.check, row_faults, row_margin);
  __syncthreads();  // every update has landed
  if (wr == 0 && lane < KP) cnt_s[rg * KP + lane] = cnt;
  if (lane == 0) inert_s[warp] = inertia;
  __syncthreads();
  Acc* part = static_cast<Acc*>(p.partials) + owner * KmeansPartialElems(p.d, p.k);
  const int64_t kd = static_cast<int64_t>(p.k) * p.d;
  for (int s = tid; s < kSlots; s += Cfg::kThreads) {
    const int gg = s % kLanes, cj = s / kLanes, jj = cj % kJ, c = cj / kJ;
    const int v = rank * Cfg::kSV + gg + jj * kLanes;
    if (c >= p.k || v >= p.nvd) continue;
    Acc tot[kE];
#pragma unroll
    for (int e = 0; e < kE; ++e) tot[e] = 0;
    for (int q = 0; q < kG; ++q) {
      Acc sv[kE];
      LoadSlot(&sums_all[q * kSlots + s], sv);
#pragma unroll
      for (int e = 0; e < kE; ++e) tot[e] += sv[e];
    }
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const int col = v * kE + e;
      if (col < p.d) part[static_cast<int64_t>(c) * p.d + col] = tot[e];
    }
  }
  if (rank == 0) {
    if (tid < p.k) {
      Acc tot = 0;
      for (int q = 0; q < kG; ++q) tot += cnt_s[q * KP + tid];
      part[kd + tid] = tot;
    }
    if (tid == 0) {
      Acc tot = 0;
      for (int w = 0; w < kKmeansWarps; ++w) tot += inert_s[w];
      part[kd + p.k] = tot;
    }
  }
  // No block may leave while a peer can still read its shared memory.
  if constexpr (kCl > 1) ClusterSync();
}

// out[o] = sum over partials b, in order, of partials[b][o]: 32 outputs per
// block, kKmeansReduceSlices slices of the partials per output added in a
// fixed tree. 32 slices (not 8): with 264 partials (two blocks per SM) a
// thread's loads are then all in flight at once rather than nine rounds of
// four behind each other.
constexpr int kKmeansReduceSlices = 32;
template <typename Acc>
__global__ void __launch_bounds__(32 * kKmeansReduceSlices)
    KmeansReduceKernel(const Acc* __restrict__ part, int64_t elems, int blocks, int64_t kd, int k,
                       Acc* __restrict__ sums, Acc* __restrict__ counts,
                       Acc* __restrict__ inertia) {
  constexpr int S = kKmeansReduceSlices;
  __shared__ Acc buf[S][32];
  const int lane = threadIdx.x % 32, s = threadIdx.x / 32;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  Acc acc = 0;
  if (o < elems) {
#pragma unroll 8
    for (int b = s; b < blocks; b += S) acc += part[static_cast<int64_t>(b) * elems + o];
  }
  buf[s][lane] = acc;
  __syncthreads();
  if (s == 0 && o < elems) {
    Acc total = 0;
#pragma unroll
    for (int ss = 0; ss < S; ++ss) total += buf[ss][lane];
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
