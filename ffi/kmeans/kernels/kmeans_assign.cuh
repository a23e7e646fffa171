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
// centroids, their fragments loaded by ldmatrix: mma.sync m16n8k8 TF32 for
// f32 (three products of split operands by default, which keeps f32
// accuracy as the fused step does; in the opt-in fast mode one product of
// operands rounded to TF32 where they land in shared memory) and m16n8k16
// for bf16/f16 (exact products), f32 accumulators. After the last step of a
// centroid tile each lane ranks its candidates by key = ||c||^2 - 2 x.c (one
// fma: ||x||^2 is the same for all of a row's centroids, so it is added
// once, to the winner, at the end: dist = max(||x||^2 + key, 0)), and keeps,
// per row, the lowest (key, index) it has seen: the lowest index wins ties,
// whatever order the candidates come in. At the end of an item
// the four lanes and the two warps that share a row agree the same way.
//
// Shared-memory rows are 128 bytes padded to 144, so that the eight 16-byte
// rows of an ldmatrix matrix hit 32 distinct banks.
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

// The cp.async copies of one operand (rows x d elements, 16-byte aligned,
// rows of whole 16-byte chunks): each thread copies four 16-byte chunks of a
// sub-tile, byte cb16 of rows r, r + 32, r + 64, r + 96 (eight neighbouring
// threads cover a row's 128 bytes). Its addresses are set up once, so that a
// step costs a few adds per chunk; a chunk past `rows` or past the row's
// bytes is zero-filled.
struct KmeansCopier {
  const char* base;  // the operand (the address a zero-filled chunk names)
  const char* src;   // chunk cb16 of row r of the operand
  int64_t row_bytes, stride, rows;
  int r, cb16, dst;

  __device__ __forceinline__ KmeansCopier(const void* base_, int64_t rows_, int64_t row_bytes_)
      : base(static_cast<const char*>(base_)),
        row_bytes(row_bytes_),
        stride(32 * row_bytes_),
        rows(rows_) {
    r = static_cast<int>(threadIdx.x) >> 3;
    cb16 = (static_cast<int>(threadIdx.x) & 7) * 16;
    dst = r * kAssignRowStride + cb16;
    src = base + r * row_bytes + cb16;
  }
  // Rows row0 .. row0 + 127, bytes 128 q .. 128 q + 127, into sub-tile `out`.
  __device__ __forceinline__ void Issue(char* out, int64_t row0, int q) const {
    const char* p = src + row0 * row_bytes + q * kAssignStepBytes;
    const bool col_ok = int64_t{q} * kAssignStepBytes + cb16 < row_bytes;
    const int64_t left = rows - row0 - r;  // this thread's rows that exist: 32 i < left
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool ok = col_ok && 32 * i < left;
      CpAsync16(out + dst + i * 32 * kAssignRowStride, ok ? p + i * stride : base, ok);
    }
  }
};

// Rows row0 .. row0 + 127 of `src` (rows x d elements of T), bytes
// 128 q .. 128 q + 127 of each, into a sub-tile (rows 144 bytes apart),
// element by element (rows not of whole 16-byte chunks, or src not aligned;
// KmeansCopier otherwise); what lies past `rows` or past d is zero.
template <typename T>
__device__ __forceinline__ void KmeansLoadSubTile(char* dst, const void* src, int64_t rows, int d,
                                                  int64_t row0, int q) {
  using Raw = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int id = static_cast<int>(threadIdx.x) + i * kAssignThreads;
    const int r = id >> 3, cb = id & 7;
    const int64_t row = row0 + r;
    const int64_t byte = int64_t{q} * kAssignStepBytes + cb * 16;
    char* out = dst + r * kAssignRowStride + cb * 16;
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

// Where a block is in its work: item (row tile, split), centroid tile j of
// [j0, j1), step q of qd. `res` is the resident copy of the item's X tile:
// the block's items take the res_slots copies in turn.
struct KmeansAssignCursor {
  int64_t item, tile;
  int j, j0, j1, q, res;
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
    res = 0;
    Enter(a);
  }
  __device__ __forceinline__ void Next(const KmeansAssignArgs& a) {
    if (++q < a.qd) return;
    q = 0;
    if (++j < j1) return;
    item += gridDim.x;
    res = res + 1 >= a.res_slots ? 0 : res + 1;
    Enter(a);
  }
};

// A k-step's fragments come from ldmatrix (four 8 x 8 matrices of 16-bit
// elements, i.e. 8 rows x 4 words): lane (g, t) gets word t of row g of each,
// which is the m16n8k8 TF32 layout (a word an element) and the m16n8k16
// bf16/f16 one (a word two elements) alike. A k-step covers words
// 8 ks .. 8 ks + 7 of the 32 a row has per pipeline step. For A (16 rows)
// the matrices are (rows 0-7, words 0-3), (rows 8-15, words 0-3), (rows 0-7,
// words 4-7), (rows 8-15, words 4-7); for B, two n8 tiles of centroids,
// (tile 0, words 0-3), (tile 0, words 4-7), (tile 1, ...). Lane l gives the
// address of row l % 8 of matrix l / 8.
__device__ __forceinline__ int KmeansARowOffset(int lane) {
  return ((lane & 7) + 8 * ((lane >> 3) & 1)) * kAssignRowStride + 16 * (lane >> 4);
}
__device__ __forceinline__ int KmeansBRowOffset(int lane) {
  return ((lane & 7) + 8 * (lane >> 4)) * kAssignRowStride + 16 * ((lane >> 3) & 1);
}

// A row's result from its best key ||c||^2 - 2 x.c: the label (0 where no
// centroid ranked, e.g. every key overflowed, as the CPU reference does) and
// the distance max(||x||^2 + key, 0).
__device__ __forceinline__ void KmeansAssignWrite(float x_sq, float key, int32_t idx,
                                                  int32_t* label, float* mind) {
  *label = idx == kAssignNoLabel ? 0 : idx;
  *mind = fmaxf(x_sq + key, 0.0f);
}

// The products of one pipeline step (four k-steps) into a warp's 32 x 64
// accumulators: `live` n8 tiles of centroids, a compile-time 8 (kLive) where
// the warp's tile is full. f32 operands of the fast mode were rounded to TF32
// in shared memory (KmeansRoundTf32Chunks).
template <typename T, bool kFast, int kLive>
__device__ __forceinline__ void KmeansStepProduct(float (&acc)[2][8][4], const char* xs,
                                                  const char* cs, int a_lane, int b_lane,
                                                  int live) {
  constexpr bool kF32 = std::is_same_v<T, float>;
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    uint32_t fa[2][4], fb[8][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      LdMatrixX4(xs + a_lane + mt * 16 * kAssignRowStride + 32 * ks, fa[mt]);
    }
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      if (kLive == 0 && 2 * p >= live) break;
      uint32_t r[4];
      LdMatrixX4(cs + b_lane + p * 16 * kAssignRowStride + 32 * ks, r);
      fb[2 * p][0] = r[0];
      fb[2 * p][1] = r[1];
      fb[2 * p + 1][0] = r[2];
      fb[2 * p + 1][1] = r[3];
    }
    if constexpr (!kF32) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        if (kLive == 0 && nt >= live) break;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) MmaHalf<T>(acc[mt][nt], fa[mt], fb[nt]);
      }
    } else if constexpr (kFast) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        if (kLive == 0 && nt >= live) break;
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
        if (kLive == 0 && nt >= live) break;
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

// Rounds to nearest TF32, in place, the four 16-byte chunks of a sub-tile
// this thread copied (KmeansCopier's, or KmeansLoadSubTile's, which map the
// same thread to the same chunks), once they have landed: each element is
// rounded once where it arrives rather than in every warp that reads it, and
// with its low bits cleared whatever the tensor cores do with them matters not.
__device__ __forceinline__ void KmeansRoundTf32Chunks(char* sub) {
  const int r = static_cast<int>(threadIdx.x) >> 3, cb16 = (static_cast<int>(threadIdx.x) & 7) * 16;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint4* p = reinterpret_cast<uint4*>(sub + (r + 32 * i) * kAssignRowStride + cb16);
    uint4 v = *p;
    v.x = (v.x + 0x1000u) & 0xffffe000u;
    v.y = (v.y + 0x1000u) & 0xffffe000u;
    v.z = (v.z + 0x1000u) & 0xffffe000u;
    v.w = (v.w + 0x1000u) & 0xffffe000u;
    *p = v;
  }
}

// The tensor-core step of KmeansAssignKernel: T the element type, kFast the
// one-product TF32 mode (f32 only), kAsync the copy path.
template <typename T, bool kFast, bool kAsync>
__global__ void __launch_bounds__(kAssignThreads, 1)
    KmeansAssignKernel(const __grid_constant__ KmeansAssignArgs a) {
  static_assert(std::is_same_v<T, float> || !kFast, "the fast mode is for f32 data");
  extern __shared__ __align__(16) char smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int wr = warp / 2, wc = warp % 2;  // 32 rows x 64 centroids of the block tile
  const int a_lane = wr * 32 * kAssignRowStride + KmeansARowOffset(lane);
  const int b_lane = wc * 64 * kAssignRowStride + KmeansBRowOffset(lane);
  const int stage_bytes = a.resident ? kAssignSubTile : 2 * kAssignSubTile;
  char* res_base = smem + a.stages * stage_bytes;
  char* scratch = res_base + (a.resident ? a.res_slots * a.qd * kAssignSubTile : 0);
  float* s_key = reinterpret_cast<float*>(scratch);
  int32_t* s_idx = reinterpret_cast<int32_t*>(scratch + 2 * kAssignRows * 4);

  // The X sub-tile step q of item `cur` reads: its stage's, or the resident copy's.
  auto x_sub = [&](const KmeansAssignCursor& cur, int slot) -> char* {
    if (!a.resident) return smem + slot * stage_bytes + kAssignSubTile;
    return res_base + (cur.res * a.qd + cur.q) * kAssignSubTile;
  };
  const int64_t row_bytes = int64_t{a.d} * static_cast<int64_t>(sizeof(T));
  const KmeansCopier c_copy(a.c, a.k, row_bytes), x_copy(a.x, a.n, row_bytes);
  auto issue = [&](const KmeansAssignCursor& cur, int slot) {
    char* st = smem + slot * stage_bytes;
    const bool x_too = !a.resident || cur.j == cur.j0;
    if constexpr (kAsync) {
      c_copy.Issue(st, int64_t{cur.j} * kAssignCents, cur.q);
      if (x_too) x_copy.Issue(x_sub(cur, slot), cur.tile * kAssignRows, cur.q);
    } else {
      KmeansLoadSubTile<T>(st, a.c, a.k, a.d, int64_t{cur.j} * kAssignCents, cur.q);
      if (x_too)
        KmeansLoadSubTile<T>(x_sub(cur, slot), a.x, a.n, a.d, cur.tile * kAssignRows, cur.q);
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
  float best_key[2][2], csq[8][2];
  int32_t best_idx[2][2];
  int slot = 0;
  while (cons.valid) {
    CpAsyncWaitAtMost(a.stages - 2);
    if constexpr (kFast) {  // this thread's copies of the step have landed: round them
      KmeansRoundTf32Chunks(smem + slot * stage_bytes);
      if (!a.resident || cons.j == cons.j0) KmeansRoundTf32Chunks(x_sub(cons, slot));
    }
    __syncthreads();  // step `slot` landed; the slot the next issue fills is free
    if (prod.valid) {
      issue(prod, prod_slot);
      prod.Next(a);
    }
    CpAsyncCommit();
    prod_slot = prod_slot + 1 == a.stages ? 0 : prod_slot + 1;

    if (cons.j == cons.j0 && cons.q == 0) {  // a new item
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          best_key[mt][h] = KmeansPosInf();
          best_idx[mt][h] = kAssignNoLabel;
        }
      }
    }
    if (cons.q == 0) {  // a new centroid tile: its norms (+Inf past k or not finite: never chosen)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int col = cons.j * kAssignCents + wc * 64 + nt * 8 + 2 * t + i;
          const float v = col < a.k ? a.csq[col] : KmeansPosInf();
          csq[nt][i] = isfinite(v) ? v : KmeansPosInf();
        }
      }
    }

    const char* xs = x_sub(cons, slot);
    const char* cs = smem + slot * stage_bytes;
    // This warp's n8 tiles that hold centroids (< k). A warp past k skips the products;
    // one with all eight runs them without a branch between them (which would keep the
    // compiler from overlapping the fragment loads with the products); one with fewer
    // (the last tile) skips the rest.
    const int live = min(8, max(0, (a.k - cons.j * kAssignCents - wc * 64 + 7) / 8));
    if (live == 8) {
      KmeansStepProduct<T, kFast, 8>(acc, xs, cs, a_lane, b_lane, 8);
    } else if (live > 0) {
      KmeansStepProduct<T, kFast, 0>(acc, xs, cs, a_lane, b_lane, live);
    }

    if (cons.q == a.qd - 1) {
      // The centroid tile is done: each row's key ||c||^2 - 2 x.c (its distance less
      // ||x||^2, which the ranking does not need) into its running minimum. A lane sees
      // its tiles in increasing index, so a strict "<" keeps the lowest index of equal
      // keys; a centroid past k or with a non-finite norm has key +Inf, never below the
      // running minimum (+Inf at first). The tile's best is found first with its index
      // as a constant, then merged. Accumulator e of (mt, nt) is row 16 mt + g + 8 (e / 2), column
      // 8 nt + 2 t + e % 2.
      const int32_t cbase = cons.j * kAssignCents + wc * 64 + 2 * t;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // The tile's 16 candidates of the row as a tree of pairwise minima (depth 4,
          // not a chain of 16 dependent compares); the left, lower index, wins ties.
          float key[16];
          int32_t at[16];
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              key[2 * nt + i] = fmaf(-2.0f, acc[mt][nt][2 * h + i], csq[nt][i]);
              at[2 * nt + i] = nt * 8 + i;
            }
          }
#pragma unroll
          for (int w = 1; w < 16; w *= 2) {
#pragma unroll
            for (int p = 0; p < 16; p += 2 * w) {
              if (key[p + w] < key[p]) {
                key[p] = key[p + w];
                at[p] = at[p + w];
              }
            }
          }
          const float tile_key = key[0];
          const int32_t tile_at = at[0];
          if (tile_key < best_key[mt][h]) {
            best_key[mt][h] = tile_key;
            best_idx[mt][h] = cbase + tile_at;
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
              KmeansAssignWrite(a.x_sq[row], key, idx, a.labels + row, a.mind + row);
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
// not finite (flags[0], zeroed before the launch); where c_round is not
// null (f32), the centroids rounded to nearest TF32 too, and where
// norms_max is not null (zeroed before the launch) the largest finite
// ||c||^2 and ||c - tf32(c)||^2 (kmeans_assign_refine.cuh's bound).
template <typename T>
__global__ void __launch_bounds__(256)
    KmeansCsqKernel(const T* __restrict__ c, int64_t k, int d, float* __restrict__ csq,
                    int32_t* __restrict__ flags, float* __restrict__ c_round,
                    float* __restrict__ norms_max = nullptr) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t j = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32; j < k; j += warps) {
    float s = 0.0f, r2 = 0.0f;
    for (int e = lane; e < d; e += 32) {
      const float v = ToAcc(c[j * d + e]);
      s = fmaf(v, v, s);
      if constexpr (std::is_same_v<T, float>) {
        if (c_round != nullptr) {
          const float vr = __uint_as_float((__float_as_uint(v) + 0x1000u) & 0xffffe000u);
          c_round[j * d + e] = vr;
          r2 = fmaf(v - vr, v - vr, r2);
        }
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      s += __shfl_xor_sync(0xffffffffu, s, off);
      r2 += __shfl_xor_sync(0xffffffffu, r2, off);
    }
    if (lane == 0) {
      csq[j] = s;
      if (!isfinite(s)) atomicAdd(flags, 1);
      // Non-negative floats order as their bits: an integer maximum, in any order.
      if (norms_max != nullptr && isfinite(s)) {
        atomicMax(reinterpret_cast<int*>(norms_max), __float_as_int(s));
        atomicMax(reinterpret_cast<int*>(norms_max) + 1, __float_as_int(r2));
      }
    }
  }
}

// The splits' results of every row merged: labels and distances.
__global__ void __launch_bounds__(256)
    KmeansSplitMergeKernel(const float* __restrict__ key, const int32_t* __restrict__ idx,
                           const float* __restrict__ x_sq, int64_t n, int splits,
                           int32_t* __restrict__ labels, float* __restrict__ mind) {
  for (int64_t row = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; row < n;
       row += int64_t{gridDim.x} * blockDim.x) {
    float bk = key[row];
    int32_t bi = idx[row];
    for (int s = 1; s < splits; ++s) KmeansLexMin(bk, bi, key[s * n + row], idx[s * n + row]);
    KmeansAssignWrite(x_sq[row], bk, bi, labels + row, mind + row);
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
