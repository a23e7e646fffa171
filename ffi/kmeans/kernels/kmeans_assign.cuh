// The closest centroid of every row for any k: labels and squared
// distances from the tiled product X C^T on tensor cores, the n x k
// distances never leaving the registers (tiled_plan.h for the plan).
//
// A block takes items (a tile of 128 rows, and its share of the centroid
// tiles when the row tiles are too few to fill the GPU) one after another.
// For each centroid tile of 128 it runs the product over d in steps of 128
// bytes of every row: a cp.async pipeline of `stages` steps brings the
// centroid sub-tile and, unless the item's X tile stays in shared memory
// (resident), the X sub-tile. Eight warps, 4 x 2, each own 32 rows x 64
// centroids: mma.sync m16n8k8 TF32 for f32 (three products of split
// operands by default, which keeps f32 accuracy as the fused step does;
// one product of TF32-rounded operands in the opt-in fast mode) and
// m16n8k16 for bf16/f16 (exact products), f32 accumulators. After the last
// step of a centroid tile each lane turns its accumulators into distances,
//   dist = max((||x||^2 - 2 x.c) + ||c||^2, 0)   (the jnp path's formula),
// and keeps, per row, the lowest (distance, index) it has seen: the lowest
// index wins ties, whatever order the candidates come in. At the end of an
// item the four lanes and the two warps that share a row agree the same way.
//
// Shared-memory rows are 128 bytes padded to 144, so that the fragment
// loads (lane (g, t) reads word t of row g) hit 32 distinct banks.
//
// Rows whose ||x||^2 is not finite and centroids whose ||c||^2 is not are
// left to KmeansFixupKernel (exact products on CUDA cores, the CPU
// reference's ranking of NaN and Inf): here such a centroid is never chosen
// and such a row's result is overwritten.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "ffi/common/half_mma.cuh"
#include "ffi/common/kernel_utils.cuh"
#include "ffi/common/tf32.cuh"
#include "ffi/kmeans/tiled_plan.h"

namespace tsm2 {

struct KmeansAssignArgs {
  const void* x;         // [n, d] T
  const void* c;         // [k, d] T
  const float* x_sq;     // [n]
  const float* csq;      // [k] (KmeansCsqKernel)
  const int32_t* flags;  // [0]: centroids with a non-finite ||c||^2
  int32_t* labels;       // [n]
  float* mind;           // [n]
  float* split_key;      // [splits, n] where splits > 1
  int32_t* split_idx;    // [splits, n]
  int64_t n;
  int d, k;
  int qd, ctiles, splits;
  int64_t items;
  int stages, res_slots;
  bool resident;
};

constexpr int32_t kAssignNoLabel = 0x7fffffff;  // no centroid chosen yet

__device__ __forceinline__ float KmeansPosInf() { return __int_as_float(0x7f800000); }

// (key, idx) <- (kc, c) when (kc, c) is lower: the ranking every merge
// below uses, so that the result does not depend on the merge order.
__device__ __forceinline__ void KmeansLexMin(float& key, int32_t& idx, float kc, int32_t c) {
  if (kc < key || (kc == key && c < idx)) {
    key = kc;
    idx = c;
  }
}

// cp.async.wait_group with a run-time depth (the stages are planned at run time).
__device__ __forceinline__ void KmeansCpAsyncWait(int pending) {
  switch (pending) {
    case 0:
      CpAsyncWait<0>();
      break;
    case 1:
      CpAsyncWait<1>();
      break;
    case 2:
      CpAsyncWait<2>();
      break;
    case 3:
      CpAsyncWait<3>();
      break;
    default:
      CpAsyncWait<4>();
      break;
  }
}

// Rows row0 .. row0 + 127 of `src` (rows x d elements of T), bytes
// 128 q .. 128 q + 127 of each, into a sub-tile (rows 144 bytes apart);
// what lies past `rows` or past d is zero. Each thread copies four 16-byte
// chunks; eight neighbouring threads cover one row's 128 bytes. kAsync
// needs rows of whole 16-byte chunks and a 16-byte aligned src (then a
// chunk is wholly in or out); otherwise elements are loaded one by one.
template <typename T, bool kAsync>
__device__ __forceinline__ void KmeansLoadSubTile(char* dst, const void* src, int64_t rows, int d,
                                                  int64_t row0, int q) {
  using Raw = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));
  const int64_t row_bytes = static_cast<int64_t>(d) * sizeof(T);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int id = static_cast<int>(threadIdx.x) + i * kAssignThreads;
    const int r = id >> 3, cb = id & 7;
    const int64_t row = row0 + r;
    const int64_t byte = int64_t{q} * kAssignStepBytes + cb * 16;
    char* out = dst + r * kAssignRowStride + cb * 16;
    if constexpr (kAsync) {
      const bool ok = row < rows && byte < row_bytes;
      const char* from = static_cast<const char*>(src) + (ok ? row * row_bytes + byte : 0);
      CpAsync16(out, from, ok);
    } else {
      const Raw* s = static_cast<const Raw*>(src);
      Raw v[kPer];
      const int64_t col0 = byte / static_cast<int64_t>(sizeof(T));
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const int64_t col = col0 + e;
        v[e] = row < rows && col < d ? s[row * d + col] : Raw(0);
      }
      memcpy(out, v, 16);
    }
  }
}

// Where a block is in its work: item (row tile, split), centroid tile j of
// [j0, j1), step q of qd. `local` counts the block's items (the resident
// copy of an item's X tile is local % res_slots).
struct KmeansAssignCursor {
  int64_t item, local, tile;
  int j, j0, j1, q;
  bool valid;

  __device__ __forceinline__ void Enter(const KmeansAssignArgs& a) {
    valid = item < a.items;
    if (!valid) return;
    tile = item / a.splits;
    const int s = static_cast<int>(item % a.splits);
    j0 = static_cast<int>(KmeansSplitBegin(a.ctiles, a.splits, s));
    j1 = static_cast<int>(KmeansSplitBegin(a.ctiles, a.splits, s + 1));
    j = j0;
    q = 0;
  }
  __device__ __forceinline__ void Start(const KmeansAssignArgs& a) {
    item = blockIdx.x;
    local = 0;
    Enter(a);
  }
  __device__ __forceinline__ void Next(const KmeansAssignArgs& a) {
    if (++q < a.qd) return;
    q = 0;
    if (++j < j1) return;
    item += gridDim.x;
    ++local;
    Enter(a);
  }
};

// The fragments of one k-step, as 32-bit words: the same addresses serve
// m16n8k8 TF32 (a word is an element) and m16n8k16 bf16/f16 (a word is two):
// A row g (+8), word t (+4); B centroid g, word t (+4); k-step ks covers
// words 8 ks .. 8 ks + 7 of the 32 a row has per step.
__device__ __forceinline__ uint32_t KmeansLds(const char* base, int row, int word) {
  return *reinterpret_cast<const uint32_t*>(base + row * kAssignRowStride + word * 4);
}

// The tensor-core step of KmeansAssignKernel: T the element type, kFast the
// one-product TF32 mode (f32 only), kAsync the copy path.
template <typename T, bool kFast, bool kAsync>
__global__ void __launch_bounds__(kAssignThreads, 1)
    KmeansAssignKernel(const __grid_constant__ KmeansAssignArgs a) {
  constexpr bool kF32 = std::is_same_v<T, float>;
  static_assert(kF32 || !kFast, "the fast mode is for f32 data");
  extern __shared__ __align__(16) char smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int wr = warp / 2, wc = warp % 2;  // 32 rows x 64 centroids of the block tile
  const int stage_bytes = a.resident ? kAssignSubTile : 2 * kAssignSubTile;
  char* res_base = smem + a.stages * stage_bytes;
  char* scratch = res_base + (a.resident ? a.res_slots * a.qd * kAssignSubTile : 0);
  float* s_key = reinterpret_cast<float*>(scratch);
  int32_t* s_idx = reinterpret_cast<int32_t*>(scratch + 2 * kAssignRows * 4);

  // The X sub-tile step q of item `cur` reads: its stage's, or the resident copy's.
  auto x_sub = [&](const KmeansAssignCursor& cur, int slot) -> char* {
    if (!a.resident) return smem + slot * stage_bytes + kAssignSubTile;
    return res_base + ((cur.local % a.res_slots) * a.qd + cur.q) * kAssignSubTile;
  };
  auto issue = [&](const KmeansAssignCursor& cur, int slot) {
    char* st = smem + slot * stage_bytes;
    KmeansLoadSubTile<T, kAsync>(st, a.c, a.k, a.d, int64_t{cur.j} * kAssignCents, cur.q);
    if (!a.resident || cur.j == cur.j0) {
      KmeansLoadSubTile<T, kAsync>(x_sub(cur, slot), a.x, a.n, a.d, cur.tile * kAssignRows, cur.q);
    }
  };

  KmeansAssignCursor prod, cons;
  prod.Start(a);
  cons.Start(a);
  int prod_slot = 0;
  for (int s = 0; s < a.stages - 1; ++s) {
    if (prod.valid) {
      issue(prod, prod_slot);
      prod.Next(a);
    }
    CpAsyncCommit();
    prod_slot = prod_slot + 1 == a.stages ? 0 : prod_slot + 1;
  }

  float acc[2][8][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
    }
  }
  float xsq[2][2], best_key[2][2], csq[8][2];
  int32_t best_idx[2][2];
  int slot = 0;
  while (cons.valid) {
    KmeansCpAsyncWait(a.stages - 2);
    __syncthreads();  // step `slot` landed; the slot the next issue fills is free
    if (prod.valid) {
      issue(prod, prod_slot);
      prod.Next(a);
    }
    CpAsyncCommit();
    prod_slot = prod_slot + 1 == a.stages ? 0 : prod_slot + 1;

    if (cons.j == cons.j0 && cons.q == 0) {  // a new item: its rows' norms
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t row = cons.tile * kAssignRows + wr * 32 + mt * 16 + g + 8 * h;
          xsq[mt][h] = row < a.n ? a.x_sq[row] : 0.0f;
          best_key[mt][h] = KmeansPosInf();
          best_idx[mt][h] = kAssignNoLabel;
        }
      }
    }
    if (cons.q == 0) {  // a new centroid tile: its norms (NaN past k: never chosen)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int col = cons.j * kAssignCents + wc * 64 + nt * 8 + 2 * t + i;
          csq[nt][i] = col < a.k ? a.csq[col] : __int_as_float(0x7fc00000);
        }
      }
    }

    const char* xs = x_sub(cons, slot);
    const char* cs = smem + slot * stage_bytes;
    // This warp's n8 tiles that hold centroids (< k): the rest are skipped (a warp past k
    // does nothing), so that k just past a multiple of 64 costs no padding products.
    const int live = min(8, max(0, (a.k - cons.j * kAssignCents - wc * 64 + 7) / 8));
    if (live > 0) {
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const int w0 = 8 * ks + t;
        uint32_t fa[2][4], fb[8][2];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const int r = wr * 32 + mt * 16 + g;
          fa[mt][0] = KmeansLds(xs, r, w0);
          fa[mt][1] = KmeansLds(xs, r + 8, w0);
          fa[mt][2] = KmeansLds(xs, r, w0 + 4);
          fa[mt][3] = KmeansLds(xs, r + 8, w0 + 4);
        }
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          if (nt >= live) break;
          const int cr = wc * 64 + nt * 8 + g;
          fb[nt][0] = KmeansLds(cs, cr, w0);
          fb[nt][1] = KmeansLds(cs, cr, w0 + 4);
        }
        if constexpr (!kF32) {
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            if (nt >= live) break;
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) MmaHalf<T>(acc[mt][nt], fa[mt], fb[nt]);
          }
        } else if constexpr (kFast) {
          // Round to nearest TF32 (the tensor cores read the top 19 bits).
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) fa[mt][e] = (fa[mt][e] + 0x1000u) & 0xffffe000u;
          }
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            if (nt >= live) break;
            fb[nt][0] = (fb[nt][0] + 0x1000u) & 0xffffe000u;
            fb[nt][1] = (fb[nt][1] + 0x1000u) & 0xffffe000u;
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) MmaTf32(acc[mt][nt], fa[mt], fb[nt][0], fb[nt][1]);
          }
        } else {
          // hi*lo + lo*hi first, then hi*hi: the small terms before the large one. The
          // centroids' low parts are rounded, the rows' truncated (one instruction less per
          // element of X, as the fused step does).
          uint32_t ah[2][4], al[2][4];
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int e = 0; e < 4; ++e)
              SplitTf32Trunc(__uint_as_float(fa[mt][e]), ah[mt][e], al[mt][e]);
          }
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            if (nt >= live) break;
            uint32_t bh[2], bl[2];
            SplitTf32(__uint_as_float(fb[nt][0]), bh[0], bl[0]);
            SplitTf32(__uint_as_float(fb[nt][1]), bh[1], bl[1]);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
              MmaTf32(acc[mt][nt], al[mt], bh[0], bh[1]);
              MmaTf32(acc[mt][nt], ah[mt], bl[0], bl[1]);
              MmaTf32(acc[mt][nt], ah[mt], bh[0], bh[1]);
            }
          }
        }
      }
    }

    if (cons.q == a.qd - 1) {
      // The centroid tile is done: distances into each row's running minimum.
      // Accumulator e of (mt, nt) is row 16 mt + g + 8 (e / 2), column 8 nt + 2 t + e % 2.
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
            if (nt >= live) break;  // no centroid there (csq is NaN past k anyway)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              const float cq = csq[nt][i];
              float dist = __fadd_rn(__fsub_rn(xsq[mt][h], 2.0f * acc[mt][nt][2 * h + i]), cq);
              dist = dist < 0.0f ? 0.0f : dist;
              if (isfinite(cq)) {
                KmeansLexMin(best_key[mt][h], best_idx[mt][h], dist,
                             cons.j * kAssignCents + wc * 64 + nt * 8 + 2 * t + i);
              }
            }
          }
        }
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
        }
      }
      if (cons.j == cons.j1 - 1) {
        // The item is done: the four lanes of a row, then its two column warps.
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int off = 1; off <= 2; off *= 2) {
              const float ok = __shfl_xor_sync(0xffffffffu, best_key[mt][h], off);
              const int32_t oi = __shfl_xor_sync(0xffffffffu, best_idx[mt][h], off);
              KmeansLexMin(best_key[mt][h], best_idx[mt][h], ok, oi);
            }
            if (t == 0) {
              const int r = wr * 32 + mt * 16 + g + 8 * h;
              s_key[wc * kAssignRows + r] = best_key[mt][h];
              s_idx[wc * kAssignRows + r] = best_idx[mt][h];
            }
          }
        }
        __syncthreads();
        if (tid < kAssignRows) {
          float key = s_key[tid];
          int32_t idx = s_idx[tid];
          KmeansLexMin(key, idx, s_key[kAssignRows + tid], s_idx[kAssignRows + tid]);
          const int64_t row = cons.tile * kAssignRows + tid;
          if (row < a.n) {
            if (a.splits == 1) {
              a.labels[row] = idx;
              a.mind[row] = key;
            } else {
              const int64_t at = (cons.item % a.splits) * a.n + row;
              a.split_key[at] = key;
              a.split_idx[at] = idx;
            }
          }
        }
        // s_key and s_idx are written again at the next item's end, after at
        // least one more step's barrier.
      }
    }
    cons.Next(a);
    slot = slot + 1 == a.stages ? 0 : slot + 1;
  }
  CpAsyncWait<0>();
}

// ||c||^2 of every centroid (one warp per centroid, f32), and how many are
// not finite (flags[0], zeroed before the launch).
template <typename T>
__global__ void __launch_bounds__(256)
    KmeansCsqKernel(const T* __restrict__ c, int64_t k, int d, float* __restrict__ csq,
                    int32_t* __restrict__ flags) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t j = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32; j < k; j += warps) {
    float s = 0.0f;
    for (int e = lane; e < d; e += 32) {
      const float v = ToAcc(c[j * d + e]);
      s = fmaf(v, v, s);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) {
      csq[j] = s;
      if (!isfinite(s)) atomicAdd(flags, 1);
    }
  }
}

// The splits' results of every row merged: labels and distances.
__global__ void __launch_bounds__(256)
    KmeansSplitMergeKernel(const float* __restrict__ key, const int32_t* __restrict__ idx,
                           int64_t n, int splits, int32_t* __restrict__ labels,
                           float* __restrict__ mind) {
  for (int64_t row = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; row < n;
       row += int64_t{gridDim.x} * blockDim.x) {
    float bk = key[row];
    int32_t bi = idx[row];
    for (int s = 1; s < splits; ++s) KmeansLexMin(bk, bi, key[s * n + row], idx[s * n + row]);
    labels[row] = bi;
    mind[row] = bk;
  }
}

// Exact f32 dot of row `row` of x and centroid j by one warp, in every lane.
template <typename T>
__device__ __forceinline__ float KmeansWarpDot(const T* x, const T* c, int64_t row, int64_t j,
                                               int d) {
  float s = 0.0f;
  for (int e = threadIdx.x % 32; e < d; e += 32)
    s = fmaf(ToAcc(x[row * d + e]), ToAcc(c[j * d + e]), s);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  return s;
}

// The CPU reference's ranking key: the distance, NaN first (-1).
__device__ __forceinline__ float KmeansExactKey(float xsq, float dot, float csq) {
  float dist = __fadd_rn(__fsub_rn(xsq, 2.0f * dot), csq);
  dist = dist < 0.0f ? 0.0f : dist;
  return dist != dist ? -1.0f : dist;
}

// Rows and centroids the tensor cores did not rank, with the CPU
// reference's formulas in exact f32 (one warp per row): a row whose
// ||x||^2 is NaN is NaN to every centroid (label 0, as the reference's
// first NaN); one whose ||x||^2 is +Inf is ranked against every centroid;
// where some ||c||^2 is not finite, every row's result takes those
// centroids in. Nothing to do (one pass over x_sq) in the usual case.
template <typename T>
__global__ void __launch_bounds__(256)
    KmeansFixupKernel(const T* __restrict__ x, const T* __restrict__ c,
                      const float* __restrict__ x_sq, const float* __restrict__ csq,
                      const int32_t* __restrict__ flags, int64_t n, int d, int64_t k,
                      int32_t* __restrict__ labels, float* __restrict__ mind) {
  const int lane = threadIdx.x % 32;
  const bool bad_centroids = flags[0] > 0;
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t r0 = warp * 32; r0 < n; r0 += warps * 32) {
    const int64_t mine = r0 + lane;
    const float xs_mine = mine < n ? x_sq[mine] : 0.0f;
    const bool bad_row = mine < n && !isfinite(xs_mine);
    uint32_t todo = __ballot_sync(0xffffffffu, bad_centroids ? mine < n : bad_row);
    while (todo != 0) {
      const int i = __ffs(todo) - 1;
      todo &= todo - 1;
      const int64_t row = r0 + i;
      const float xs = __shfl_sync(0xffffffffu, xs_mine, i);
      float key;
      int32_t idx;
      if (xs != xs) {
        key = -1.0f;
        idx = 0;
      } else if (!isfinite(xs)) {
        key = KmeansPosInf();
        idx = kAssignNoLabel;
        for (int64_t j = 0; j < k; ++j) {
          KmeansLexMin(key, idx, KmeansExactKey(xs, KmeansWarpDot(x, c, row, j, d), csq[j]),
                       static_cast<int32_t>(j));
        }
      } else {
        key = mind[row];
        idx = labels[row];
        for (int64_t j = 0; j < k; ++j) {
          if (isfinite(csq[j])) continue;
          KmeansLexMin(key, idx, KmeansExactKey(xs, KmeansWarpDot(x, c, row, j, d), csq[j]),
                       static_cast<int32_t>(j));
        }
      }
      if (lane == 0) {
        labels[row] = idx;
        mind[row] = key < 0.0f ? __int_as_float(0x7fc00000) : key;
      }
    }
  }
}

}  // namespace tsm2
