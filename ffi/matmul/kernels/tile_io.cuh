// What the streaming tiles (tsm2.cuh for R, tsm2l.cuh for L) share: copies
// of A whatever its alignment, a ring whose depth the plan chooses at run
// time, B staged as accumulators, and a tile's output written as 16-byte
// vectors. CUDA only, no XLA headers.
//
// Every copy of A is a 16-byte cp.async from a 16-byte aligned address: a
// row (or a tile's span of rows) that starts or ends inside a vector is
// copied as the vectors that cover it, into shared memory at the same
// address modulo 16, and the compute reads its elements where they are. The
// bytes of a covering vector that belong to a neighbour are never read as
// elements, and nothing past the end of the data is read.
#pragma once

#include <cstdint>
#include <cstring>

#include "ffi/common/kernel_utils.cuh"
#include "ffi/matmul/tiles.h"

namespace tsm2 {

// 16-byte cp.async of the first `bytes` (0 to 16) bytes at gmem, the rest of
// the 16 zero-filled (src-size < cp-size). gmem is 16-byte aligned; with
// bytes == 0 nothing is read.
__device__ __forceinline__ void CpAsyncPart16(void* smem, const void* gmem, int bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes)
               : "memory");
}

// Division by a run-time divisor d in [1, 2^16) of q < 2^16 by a multiply:
// floor(q / d) == umulhi(q, ceil(2^32 / d)) there (the error of the rounded
// reciprocal, under q / 2^32, never crosses an integer).
struct Div32 {
  uint32_t d = 1;
  uint32_t magic = 0;  // ceil(2^32 / d); unused for d == 1
};
inline Div32 MakeDiv32(uint32_t d) {
  Div32 v;
  v.d = d < 1 ? 1 : d;
  v.magic = v.d == 1 ? 0 : static_cast<uint32_t>(((uint64_t{1} << 32) + v.d - 1) / v.d);
  return v;
}
__device__ __forceinline__ uint32_t Quot(uint32_t q, const Div32& v) {
  return v.d == 1 ? q : __umulhi(q, v.magic);
}

// The persistent grids split their work units evenly: block b takes units
// [UnitBegin(b), UnitBegin(b + 1)), so the owner of unit u is the largest b
// with UnitBegin(b) <= u.
__host__ __device__ inline int64_t UnitBegin(int64_t b, int64_t units, int64_t blocks) {
  return b * units / blocks;
}

// The rings' waits (CpAsyncWaitAtMost) name each pending count up to kMaxStages - 2.
static_assert(kMaxStages - 2 <= kCpAsyncMaxPending, "a ring deeper than the waits");

__device__ __forceinline__ uintptr_t Low4(const void* p) {
  return reinterpret_cast<uintptr_t>(p) & 15u;
}

// One element of A from shared memory (any element-aligned address).
template <typename T>
__device__ __forceinline__ AccType<T> LoadElem(const char* p) {
  return ToAcc(*reinterpret_cast<const T*>(p));
}

// acc[i][j] += av[i] * brow[j]: one row of B (read from shared memory in
// 16-byte broadcasts where the row allows) against Rpt rows' values of A.
template <int NT, int Rpt, typename Acc>
__device__ __forceinline__ void FmaRow(const Acc* brow, const Acc (&av)[Rpt], Acc (&acc)[Rpt][NT]) {
  constexpr int kW =
      NT % (16 / static_cast<int>(sizeof(Acc))) == 0 ? 16 / static_cast<int>(sizeof(Acc)) : 1;
#pragma unroll
  for (int j0 = 0; j0 < NT; j0 += kW) {
    Acc bv[kW];
    LoadSmemRow<kW>(brow + j0, bv);
#pragma unroll
    for (int i = 0; i < Rpt; ++i) {
#pragma unroll
      for (int j = 0; j < kW; ++j) acc[i][j0 + j] = fma(av[i], bv[j], acc[i][j0 + j]);
    }
  }
}

// --- B -----------------------------------------------------------------------

// Element e of a B stage of KC rows (k) by NT columns: (row kk, column j).
// B given as k x n: consecutive threads take consecutive columns. Given as
// n x k (layout NT): a warp takes 8 rows x 4 columns, 8 consecutive k (one
// run in memory) per column, and with the row stride of BRowStride its
// stores meet 32 distinct banks. Elements of either mapping number KC times
// NT rounded up to 4; those with j >= NT are skipped.
template <int NT, int KC>
__device__ __forceinline__ void BElem(bool b_trans, int e, int* kk, int* j) {
  if (b_trans) {
    static_assert(KC % 8 == 0, "the n x k mapping takes rows in eights");
    const int lane = e & 31, q = e >> 5;
    constexpr int kBlocksK = KC / 8;
    *kk = (q % kBlocksK) * 8 + (lane & 7);
    *j = (q / kBlocksK) * 4 + (lane >> 3);
  } else {
    *kk = e / NT;
    *j = e % NT;
  }
}

// B[k0 + kk, n0 + j] as an accumulator, -0 past the matrix (no sum reads
// those: the compute stops at k, and columns past n are never stored).
template <typename T>
__device__ __forceinline__ AccType<T> LoadB(const T* b, bool b_trans, int64_t k, int64_t n,
                                            int64_t kk, int64_t j) {
  if (kk >= k || j >= n) return AccType<T>(-0.0f);
  return ToAcc(__ldg(b + (b_trans ? j * k + kk : kk * n + j)));
}

// --- A tile's output -------------------------------------------------------------

// How a tile's output (rows x n values, one contiguous run of C when the
// problem has one n-tile) is staged in shared memory and written:
// - vec_rows (n * osize a multiple of 16, C 16-byte aligned): each row as
//   16-byte vectors at an odd stride of row_units vectors;
// - otherwise packed as in C, from the address of C's run modulo 16, so that
//   the run is copied out as aligned 16-byte vectors, with the vectors it
//   shares with the neighbouring tiles written element by element.
struct OutLayout {
  int n = 0;              // columns of C
  int osize = 0;          // bytes per output
  bool vec_rows = false;  // n * osize % 16 == 0 and C 16-byte aligned
  int vecs_per_row = 0;   // vec_rows: n * osize / 16
  int row_units = 0;      // vec_rows: staging row stride in vectors (odd)
  Div32 vdiv;             // vec_rows: division by vecs_per_row
  bool pairs = false;     // packed 2-byte outputs stored two at a time (n even, C 4-aligned)
};
inline OutLayout MakeOutLayout(int64_t n, int osize, const void* c) {
  OutLayout o;
  o.n = static_cast<int>(n);
  o.osize = osize;
  const uintptr_t c_addr = reinterpret_cast<uintptr_t>(c);
  o.vec_rows = n * osize % 16 == 0 && c_addr % 16 == 0;
  if (o.vec_rows) {
    o.vecs_per_row = static_cast<int>(n * osize / 16);
    o.row_units = o.vecs_per_row % 2 ? o.vecs_per_row : o.vecs_per_row + 1;
    o.vdiv = MakeDiv32(static_cast<uint32_t>(o.vecs_per_row));
  }
  o.pairs = osize == 2 && n % 2 == 0 && c_addr % 4 == 0;
  return o;
}

// Row r's NT values (the first n of them kept) into the staging buffer of a
// tile whose run of C starts at byte offc modulo 16, as outputs of type U.
template <typename U, int NT, typename Acc>
__device__ __forceinline__ void PutRowAs(const OutLayout& o, char* buf, int r, int offc,
                                         const Acc (&v)[NT]) {
  constexpr int kW = 16 / static_cast<int>(sizeof(U));
  if (o.vec_rows) {
    char* row = buf + r * o.row_units * 16;
#pragma unroll
    for (int u = 0; u < (NT + kW - 1) / kW; ++u) {
      if (u * kW < o.n) {
        U packed[kW];
#pragma unroll
        for (int e = 0; e < kW; ++e) {
          constexpr int kLast = NT - 1;
          const int j = u * kW + e;
          FromAcc(j < NT ? v[j < NT ? j : kLast] : Acc(0), &packed[e]);
        }
        uint4 raw;
        memcpy(&raw, packed, 16);
        *reinterpret_cast<uint4*>(row + u * 16) = raw;
      }
    }
    return;
  }
  char* row = buf + offc + r * o.n * static_cast<int>(sizeof(U));
  if constexpr (sizeof(U) == 2 && NT % 2 == 0) {
    if (o.pairs) {
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
        if (j < o.n) {
          U two[2];
          FromAcc(v[j], &two[0]);
          FromAcc(v[j + 1], &two[1]);
          uint32_t w;
          memcpy(&w, two, 4);
          *reinterpret_cast<uint32_t*>(row + j * 2) = w;
        }
      }
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    if (j < o.n) FromAcc(v[j], reinterpret_cast<U*>(row + j * static_cast<int>(sizeof(U))));
  }
}

// The same in C's type: T, or f32 for 2-byte types with out_f32.
template <typename T, int NT>
__device__ __forceinline__ void PutRow(const OutLayout& o, bool out_f32, char* buf, int r, int offc,
                                       const AccType<T> (&v)[NT]) {
  if (out_f32) {
    PutRowAs<float, NT>(o, buf, r, offc, v);
  } else {
    PutRowAs<T, NT>(o, buf, r, offc, v);
  }
}

// Copies a staged tile of `rows` rows to its run of C at c_tile, the first
// `threads` threads of the block taking consecutive 16-byte vectors.
__device__ __forceinline__ void WriteTile(const OutLayout& o, const char* buf, char* c_tile,
                                          int rows, int threads) {
  if (o.vec_rows) {
    const int total = rows * o.vecs_per_row;
    for (int q = threadIdx.x; q < total; q += threads) {
      const int r = static_cast<int>(Quot(static_cast<uint32_t>(q), o.vdiv));
      const int u = q - r * o.vecs_per_row;
      *reinterpret_cast<uint4*>(c_tile + static_cast<int64_t>(q) * 16) =
          *reinterpret_cast<const uint4*>(buf + (r * o.row_units + u) * 16);
    }
    return;
  }
  const int bytes = rows * o.n * o.osize;
  const int offc = static_cast<int>(Low4(c_tile));
  char* c0 = c_tile - offc;
  const int vecs = (offc + bytes + 15) / 16;
  for (int q = threadIdx.x; q < vecs; q += threads) {
    const int lo = q * 16 - offc;  // the tile's byte at this vector's start
    if (lo >= 0 && lo + 16 <= bytes) {
      *reinterpret_cast<uint4*>(c0 + q * 16) = *reinterpret_cast<const uint4*>(buf + q * 16);
    } else {
      // A vector shared with the neighbouring tile: only this tile's bytes,
      // two at a time (every output is 2-byte aligned).
#pragma unroll
      for (int h = 0; h < 16; h += 2) {
        if (lo + h >= 0 && lo + h < bytes) {
          *reinterpret_cast<uint16_t*>(c0 + q * 16 + h) =
              *reinterpret_cast<const uint16_t*>(buf + q * 16 + h);
        }
      }
    }
  }
}

// Copies a staged tile that is not one run of C (problems with several
// n-tiles): `rows` rows of NT staged values (layout `o`, o.n == NT), of which
// the first `cols` go to C's row segments at c_tile + r * row_stride bytes,
// consecutive threads (the first `threads` of the block) on consecutive
// columns.
template <int NT>
__device__ __forceinline__ void WriteTileColumns(const OutLayout& o, const char* buf, char* c_tile,
                                                 int64_t row_stride, int rows, int cols,
                                                 int threads) {
  for (int q = threadIdx.x; q < rows * NT; q += threads) {
    const int r = q / NT, j = q % NT;
    if (j >= cols) continue;
    const char* src = buf + r * o.row_units * 16 + j * o.osize;
    char* dst = c_tile + r * row_stride + j * o.osize;
    switch (o.osize) {
      case 2:
        *reinterpret_cast<uint16_t*>(dst) = *reinterpret_cast<const uint16_t*>(src);
        break;
      case 4:
        *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(src);
        break;
      default:
        *reinterpret_cast<uint64_t*>(dst) = *reinterpret_cast<const uint64_t*>(src);
        break;
    }
  }
}

}  // namespace tsm2
